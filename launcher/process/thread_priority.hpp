#pragma once
// Nice values of ddprun's own threads. The threads through which a node meets the others (the rendezvous store's, and
// the rendezvous client's: its requests, heartbeats and membership checks) are idle but for a few store requests a
// second, and every node waits when one of them waits for a time slice; so they run at a higher priority where that
// is allowed. Threads they start inherit it; a thread that must not (a console writer) takes the process's back.
#include <optional>
#include <string>

namespace ddprun::launcher {

/// The nice value the threads of the rendezvous run at where allowed: -20, not -10, because a thread's share of a busy
/// CPU is its weight over all runnable ones' (Linux CFS/EEVDF weights): against a thousand runnable threads at nice 0,
/// -10 (weight 9,548) is still under 1% of a core, -20 (88,761) about 8%.
constexpr int kRendezvousThreadNice = -20;

/// Sets the calling thread's nice value to `wanted` where allowed (root or CAP_SYS_NICE); where only RLIMIT_NICE
/// allows a raise, to the lowest value it allows (setpriority refuses a value beyond the limit instead of capping it);
/// otherwise leaves it. Returns the nice value set, or nullopt with `why` (strerror of the refusal) when none was.
std::optional<int> raiseThisThreadPriority(int wanted, std::string* why = nullptr);

/// Gives the calling thread the process's nice value (its main thread's: Linux keeps one per thread) when it has
/// inherited a higher priority from the thread that started it; a lower one it keeps. Lowering a priority needs no
/// privilege, so this cannot fail where it matters.
void dropInheritedPriority();

}  // namespace ddprun::launcher
