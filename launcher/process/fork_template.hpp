#pragma once
// ddprun's side of the forkserver protocol (common/forkserver.hpp): with --start-method forkserver and a
// program that supports it, the program is started once as a template, and every rank of every attempt is
// forked from it, skipping the cold start. The ranks become ddprun's children (ddprun is a child subreaper)
// and are watched, signalled and guarded like any worker.
#include <sys/types.h>

#include <boost/asio.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/process_spawn.hpp"

namespace ddprun::launcher {

class OutputRelay;

class ForkTemplate {
 public:
  /// How long the template may take to be ready (its start-up: loading libraries, decoding data).
  static constexpr std::chrono::seconds kReadyTimeout{300};

  ForkTemplate(boost::asio::io_context& io, ChildReaper& reaper, OrphanGuard& guard);
  /// Closes the connection (the template exits) and kills the template if it is still there.
  ~ForkTemplate();
  ForkTemplate(const ForkTemplate&) = delete;
  ForkTemplate& operator=(const ForkTemplate&) = delete;

  /// Starts `command` as the template with `env` on top of ddprun's environment; its output goes to the
  /// console with the prefix "[forkserver]:". `onReady(true)` runs on the loop once it is ready to fork,
  /// `onReady(false)` when it refused, ended or timed out (with one log line saying why).
  void start(const std::vector<std::string>& command, const std::map<std::string, std::string>& env,
             std::function<void(bool)> onReady);
  bool ready() const { return ready_; }

  /// Asks the template for a rank with `env` (set on top of the template's environment), the given
  /// standard streams (-1: /dev/null) and a session of its own or a process group of its own. Returns its
  /// pid. Throws ddprun::Error when the template cannot (the caller starts the rank the normal way).
  pid_t fork(const std::map<std::string, std::string>& env, int stdinFd, int stdoutFd, int stderrFd, bool session);

 private:
  void awaitReady();
  void finishStart(bool ok, const std::string& why);
  /// After a fork request timed out: kills whatever rank the template reports having forked after all.
  void killLateRanks();

  boost::asio::io_context& io_;
  ChildReaper& reaper_;
  OrphanGuard& guard_;
  boost::asio::posix::stream_descriptor socket_;
  boost::asio::steady_timer readyTimer_;
  std::shared_ptr<OutputRelay> out_, err_;
  pid_t pid_ = -1;
  bool ready_ = false;
  bool exited_ = false;
  std::function<void(bool)> onReady_;
};

}  // namespace ddprun::launcher
