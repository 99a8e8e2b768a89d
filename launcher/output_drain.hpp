#pragma once
// The end of a run, for the workers' output: nothing they wrote is lost. ddprun waits for the console for as long
// as its reader takes bytes; when the reader is stuck (or ddprun was told to stop by a signal), what the console
// could not take is saved into the run's log directory instead.
#include <boost/asio.hpp>
#include <chrono>
#include <string>

#include "launcher/worker_group.hpp"

namespace ddprun::launcher {

/// The file, in the run's log directory, that takes what a stuck console could not.
inline constexpr const char* kUnshownOutputFile = "console-unshown.log";

/// Runs `io` until every worker's output has ended and reached the console, for as long as bytes keep moving
/// (read from the workers or taken by the console's reader): false once nothing moved for `idle`.
bool drainWorkerOutput(boost::asio::io_context& io, const WorkerGroup& group, std::chrono::milliseconds idle);

/// Saves what the consoles still hold and what the workers wrote that was not shown into
/// <runDir>/console-unshown.log; returns its path ("" when there was nothing, or after one warning when it cannot
/// be written).
std::string saveUnshownOutput(WorkerGroup& group, const std::string& runDir);

}  // namespace ddprun::launcher
