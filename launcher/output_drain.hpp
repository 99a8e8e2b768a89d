#pragma once
// The end of a run, for the workers' output: nothing they wrote is lost. As torchrun does (its workers write to the
// console themselves), ddprun waits for the console's reader for as long as it takes, `ddprun … | less` left on its
// first page for minutes included; only a signal to ddprun, or the reader going away (EPIPE), ends the wait. Output
// that never ends without waiting for the reader (a worker's child that keeps the pipe open) is given up after a
// pause; what the console could not take is then saved into the run's log directory instead.
#include <boost/asio.hpp>
#include <chrono>
#include <string>

#include "launcher/worker_group.hpp"

namespace ddprun::launcher {

/// The file, in the run's log directory, that takes what a stuck console could not.
inline constexpr const char* kUnshownOutputFile = "console-unshown.log";

/// Runs `io` until every worker's output has ended and reached the console: while bytes wait for the console's
/// reader without limit; otherwise (output that does not end) false once nothing moved for `idle`; once `*signalled`
/// is set (a handler on `io` sets it), false once nothing moved for `afterSignal`.
bool drainWorkerOutput(boost::asio::io_context& io, const WorkerGroup& group, std::chrono::milliseconds idle,
                       const bool* signalled, std::chrono::milliseconds afterSignal);

/// Saves what the consoles still hold and what the workers wrote that was not shown into
/// <runDir>/console-unshown.log; returns its path ("" when there was nothing, or after one warning when it cannot
/// be written).
std::string saveUnshownOutput(WorkerGroup& group, const std::string& runDir);

}  // namespace ddprun::launcher
