#pragma once
// The watch's settings as the user gives them (--hang-timeout and friends, --straggler-*): the option table
// fills them, the watch reads them; neither needs the other's code.
#include <optional>

namespace ddprun::launcher {

/// --hang-timeout and friends.
struct HangSettings {
  enum class Mode { kAuto, kFixed, kOff };
  Mode mode = Mode::kAuto;
  double fixedSeconds = 0;           ///< kFixed
  double minTimeoutSeconds = 5;      ///< --hang-min-timeout: auto's floor
  double safetyFactor = 5;           ///< auto: this many times the longest interval seen
  double busyTimeoutSeconds = 1800;  ///< --hang-busy-timeout: no step for this long is a hang even while ranks work
  double idleTimeoutSeconds = 600;   ///< --hang-idle-timeout: no step for this long with every rank idle outside
                                     ///< collectives (no deadlock: a data wait, a warm-up) is a hang
  double spinTimeoutSeconds = 30;    ///< --hang-spin-timeout: CPU alone, main thread in one place, a peer waiting in a
                                     ///< collective, for this long (or 20 x the longest step) is a spin
  /// --hang-spin-action: what a spin leads to. No evidence tells a spin from a long computation for certain, so by
  /// default it is reported (a warning, the rank's stacks, the status page) and the busy timeout stops the group.
  enum class SpinAction { kReport, kRestart };
  SpinAction spinAction = SpinAction::kReport;
  std::optional<double> outputTimeoutSeconds;  ///< --output-timeout: silence on stdout/stderr that long
};

/// --straggler-factor and --straggler-window.
struct StragglerSettings {
  double factor = 1.5;        ///< flagged when the others' median pace exceeds this rank's by this factor
  double windowSeconds = 10;  ///< paces are compared over windows of this length
};

}  // namespace ddprun::launcher
