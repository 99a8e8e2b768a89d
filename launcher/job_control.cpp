#include "launcher/job_control.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "launcher/config/scheduler_env.hpp"
#include "launcher/process/console_writer.hpp"

namespace ddprun::launcher {
namespace {

bool isStopSignal(int signal) { return signal == SIGINT || signal == SIGTERM || signal == SIGHUP || signal == SIGQUIT; }

/// Slurm's warnings (SIGUSR1, SIGUSR2) and every listed signal that does not stop the job: these are read with
/// their sender, the stop signals through the Asio signal set.
std::vector<int> warningSignals(const std::vector<int>& listed) {
  std::vector<int> signals{SIGUSR1, SIGUSR2};
  for (int signal : listed) {
    if (!isStopSignal(signal) && std::find(signals.begin(), signals.end(), signal) == signals.end()) {
      signals.push_back(signal);
    }
  }
  return signals;
}

}  // namespace

JobControl::JobControl(boost::asio::io_context& io, const std::vector<int>& listed, AgentPolicy& policy,
                       WorkerGroup& group, WorkerWatch& watch)
    : listed_(listed),
      policy_(policy),
      group_(group),
      watch_(watch),
      stopSignals_(io, SIGINT, SIGTERM, SIGHUP),
      warnings_(io, warningSignals(listed)),
      jobControl_(io, SIGTSTP, SIGCONT, SIGWINCH) {
  // ddprun's own stop signals and Slurm's warnings always, and whatever --signals-to-handle lists: a signal is never
  // the silent end of ddprun.
  stopSignals_.add(SIGQUIT);
}

void JobControl::start() {
  waitForStopSignals();
  warnings_.asyncWait([this](int signal, pid_t sender) { onSignal(signal, sender); });
  waitForJobControl();
}

void JobControl::cancel() {
  stopSignals_.cancel();
  warnings_.cancel();
  jobControl_.cancel();
}

void JobControl::noteStopSignal(bool* signalled) {
  stopSignals_.async_wait([signalled](const boost::system::error_code& ec, int) { *signalled = *signalled || !ec; });
}

void JobControl::waitForStopSignals() {
  stopSignals_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    onSignal(signal, 0);
    waitForStopSignals();
  });
}

void JobControl::onSignal(int signal, pid_t sender) {
  const bool handled = std::find(listed_.begin(), listed_.end(), signal) != listed_.end();
  if (!handled) {
    spdlog::warn(
        "received {}, which --signals-to-handle does not list: stopping the workers (SIGTERM) and exiting with {}",
        signalName(signal), 128 + signal);
    policy_.onSignal(signal, SIGTERM);
  } else if (isStopSignal(signal)) {
    policy_.onSignal(signal);
  } else if (sender > 0 && signalReachedTheWholeStep(processName(sender))) {
    // SIGUSR1 and the like from Slurm: the workers have it already, straight from Slurm.
    spdlog::info(
        "received {} from Slurm, which signals every process of the job step: the workers have it too, so ddprun "
        "does not forward it again",
        signalName(signal));
  } else {
    // SIGUSR1 and the like (Slurm's "time is nearly up"): the workers decide what to do; the job goes on.
    spdlog::info("received {}; forwarding it to the workers (--signals-to-handle)", signalName(signal));
    group_.signalAll(signal);
  }
}

void JobControl::waitForJobControl() {
  jobControl_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    if (signal == SIGTSTP) suspend();
    if (signal == SIGCONT) {
      group_.resume();
      watch_.resume();
      // A SIGCONT that follows no SIGTSTP (timeout(1) sends one with its SIGTERM) continues nothing: no line.
      if (suspended_) spdlog::info("continued (SIGCONT): the workers run again");
      suspended_ = false;
    }
    if (signal == SIGWINCH) group_.resize(STDOUT_FILENO);
    waitForJobControl();
  });
}

void JobControl::suspend() {
  spdlog::info("stopped (SIGTSTP): the workers are stopped too; fg or bg resumes them");
  suspended_ = true;
  watch_.pause();
  group_.suspend();
  consoleErr().flush(std::chrono::milliseconds(100));
  ::raise(SIGSTOP);  // ddprun itself, as the terminal asked; SIGCONT (fg, bg) continues here
}

}  // namespace ddprun::launcher
