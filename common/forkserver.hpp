#pragma once
// ddprun's forkserver protocol, the program's side (version 1). With `ddprun --start-method forkserver`, a
// program that supports it is started once per job as a *template*: it does its slow start-up (loading
// libraries, decoding a data set) and then becomes a fork server; every rank of every attempt is a fork() of
// it, so a restart skips the cold start and the ranks share the template's memory copy-on-write. A program
// that does not support it is started the normal way, once per rank.
//
// A program supports it by linking this file and calling runForkServerIfAsked() once its start-up is done and
// before it starts any thread (OpenMP, Gloo and CUDA start after the fork; the template never initialises
// CUDA). Linking it puts the marker ddprun looks for into the program: an ELF section named
// ".ddprun_forkserver" (kForkServerSection).
//
// The conversation, over the Unix SOCK_SEQPACKET socket whose descriptor ddprun passes in
// DDPRUN_FORKSERVER_FD (one datagram per message, text):
//   template -> ddprun   "ready <pid>"                     start-up done, no thread but the main one
//                        "refuse <reason>"                 cannot serve (e.g. threads exist); ddprun starts
//                                                          ranks the normal way
//   ddprun -> template   "fork\n<flags>\n<KEY=VALUE>\n…"    with 3 descriptors (SCM_RIGHTS): the rank's stdin,
//                                                          stdout and stderr; flags: "session" or "group"
//   template -> ddprun   "forked <pid>" | "error <reason>"
// The template forks a child that forks the rank and exits at once, so the rank is re-parented to ddprun (a
// child subreaper) and ddprun waits for it like any worker. The rank waits until it is ddprun's child, sets
// PR_SET_PDEATHSIG, its own process group (or session), PR_SET_PTRACER for ddprun, its streams and its
// environment, and returns from runForkServerIfAsked() as an ordinary rank. The template ends when ddprun
// closes the socket (and with ddprun, through PR_SET_PDEATHSIG).
#include <string>

namespace ddprun {

/// The environment variable that makes a process ddprun's forkserver template.
inline constexpr const char* kForkServerFdEnv = "DDPRUN_FORKSERVER_FD";
/// The ELF section whose presence says a program supports the protocol.
inline constexpr const char* kForkServerSection = ".ddprun_forkserver";

/// Whether this process is ddprun's forkserver template: DDPRUN_FORKSERVER_FD names an open Unix SOCK_SEQPACKET
/// socket. A marker that names none (inherited by accident) is dropped with one line on stderr: a normal program.
bool forkServerAsked();

/// Returns at once in a process that is not a template. In a template, serves fork requests until ddprun
/// closes the connection (then exits 0) and returns only in a forked rank, whose environment and standard
/// streams are then those ddprun asked for. Call it single-threaded. Throws nothing; a template that cannot
/// serve says why to ddprun and exits.
void runForkServerIfAsked();

/// Whether `program` (a path) is an ELF file with the ".ddprun_forkserver" section.
bool supportsForkServer(const std::string& program);

}  // namespace ddprun
