#include "launcher/process/start_methods.hpp"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include "common/forkserver.hpp"
#include "common/spare_rank.hpp"

namespace ddprun::launcher {

StartMethods::StartMethods(boost::asio::io_context& io, ChildReaper& reaper, OrphanGuard& guard)
    : io_(io), reaper_(reaper), guard_(guard), spareTimer_(io) {}

StartMethods::~StartMethods() = default;

void StartMethods::startForkServer(const std::string& program, const std::vector<std::string>& command,
                                   std::map<std::string, std::string> env, bool wantSpare, std::function<void()> then) {
  if (program.empty() || !supportsForkServer(program)) {
    spdlog::info("--start-method forkserver: {} does not support it (no {} section); ranks start the normal way",
                 command[0], kForkServerSection);
    then();
    return;
  }
  // The ranks are forked by the template's child, which exits: ddprun adopts them as a child subreaper.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  guard_.start();  // its pid, which the reaper leaves to it, exists from here on
  reaper_.reapAdopted(guard_.pid());
  env_ = std::move(env);
  forkServer_ = std::make_unique<ForkTemplate>(io_, reaper_, guard_);
  forkServer_->start(command, env_, [this, then, program, wantSpare](bool ready) {
    if (ready && wantSpare && supportsSpareRank(program)) spare_ = std::make_unique<SpareRank>(io_, reaper_, guard_);
    then();
  });
}

void StartMethods::prepareSpareAfter(std::chrono::milliseconds delay, std::function<bool()> wanted) {
  if (!spare_) return;
  spareTimer_.expires_after(delay);
  spareTimer_.async_wait([this, wanted](const boost::system::error_code& ec) {
    if (ec || !forkServer_ || !wanted()) return;
    spare_->prepare(*forkServer_, env_);  // everything of a rank's own comes with the claim
  });
}

void StartMethods::stop() {
  spareTimer_.cancel();
  spare_.reset();
  forkServer_.reset();
}

}  // namespace ddprun::launcher
