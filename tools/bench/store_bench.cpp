// store_bench: raw-socket load for a TCPStore server (ddprun-store, or PyTorch's own server), used by
// tools/bench/store_storm.sh and tools/bench/store_attacks.sh. Speaks the torch 1.13 dialect (which both
// ddprun's store and python3-torch 1.13's server understand) unless an attack needs 2.x. Prints one JSON
// line per run.
//   store_bench storm PORT N            N clients connect (one epoll loop, at most 1,024 connects in
//                                       flight), ADD a counter, and WAIT for the key the last one sets.
//   store_bench latency PORT SECONDS [fresh]
//                                       a normal client's ADD round trips (p50/p99 in ms); `fresh` opens a
//                                       new connection for each one (what a newly started worker sees).
//   store_bench attack PORT KIND SECONDS
//                                       runs one attack until SECONDS pass; KIND: multiget_bomb,
//                                       unread_replies, streamed_check, dribble, silent, slow_close,
//                                       gone_gets, gone_cas, fill.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

uint16_t gPort = 0;

// Wire helpers (little-endian, as c10d writes them).
std::string u64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string str(const std::string& s) { return u64(s.size()) + s; }
std::string cmd(uint8_t c) { return std::string(1, static_cast<char>(c)); }
// 1.13 command bytes (TCPStore.cpp at v1.13.1) and the 2.x ones the attacks need.
constexpr uint8_t kSet113 = 0, kAdd113 = 3, kCheck113 = 4, kWait113 = 5;
const std::string kValidate2 = cmd(0) + u32(0x3C85F7CE);
constexpr uint8_t kSet2 = 1, kCompareSet2 = 2, kGet2 = 3, kMultiGet2 = 10;

int connectTo(bool nonBlocking = false) {
  int fd = ::socket(AF_INET, SOCK_STREAM | (nonBlocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(gPort);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool sendAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

/// Reads exactly n bytes within `timeoutMs`; false on EOF, error or timeout.
bool recvAll(int fd, char* out, size_t n, int timeoutMs) {
  size_t done = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  while (done < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    ssize_t got = ::recv(fd, out + done, n - done, 0);
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- storm ----------------------------------------------------------------------------------------------

int storm(int n) {
  enum class Step { kConnecting, kAdded, kWaiting, kDone, kFailed };
  struct Client {
    int fd = -1;
    Step step = Step::kConnecting;
    std::string in;
  };
  std::vector<Client> clients(static_cast<size_t>(n));
  int epoll = ::epoll_create1(0);
  const std::string run = "storm/" + std::to_string(::getpid()) + "/";  // fresh keys for every run
  const std::string add = cmd(kAdd113) + str(run + "count") + u64(1);
  const std::string wait = cmd(kWait113) + u64(1) + str(run + "last");
  const std::string setLast = cmd(kSet113) + str(run + "last") + str("1");
  int started = 0, inFlight = 0, done = 0, failed = 0;
  std::string firstError;
  auto fail = [&](Client& c, const std::string& why) {
    if (firstError.empty()) firstError = why;
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    if (c.step == Step::kConnecting) --inFlight;
    c.step = Step::kFailed;
    ++failed;
  };
  const auto start = Clock::now();
  const auto deadline = start + 180s;
  std::vector<epoll_event> events(4096);
  while (done + failed < n && Clock::now() < deadline) {
    while (started < n && inFlight < 1024) {  // the listen backlog is finite: connect in waves
      Client& c = clients[static_cast<size_t>(started)];
      c.fd = connectTo(true);
      if (c.fd < 0) {
        fail(c, std::string("socket/connect: ") + std::strerror(errno));
      } else {
        epoll_event ev{};
        ev.events = EPOLLOUT | EPOLLIN;
        ev.data.u32 = static_cast<uint32_t>(started);
        ::epoll_ctl(epoll, EPOLL_CTL_ADD, c.fd, &ev);
        ++inFlight;
      }
      ++started;
    }
    const int ready = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), 100);
    for (int i = 0; i < ready; ++i) {
      Client& c = clients[events[static_cast<size_t>(i)].data.u32];
      if (c.step == Step::kFailed || c.step == Step::kDone) continue;
      if (events[static_cast<size_t>(i)].events & (EPOLLERR | EPOLLHUP)) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        fail(c, std::string("connection: ") + (err ? std::strerror(err) : "closed by the server"));
        continue;
      }
      if (c.step == Step::kConnecting) {
        if (!(events[static_cast<size_t>(i)].events & EPOLLOUT)) continue;
        --inFlight;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = events[static_cast<size_t>(i)].data.u32;
        ::epoll_ctl(epoll, EPOLL_CTL_MOD, c.fd, &ev);
        if (!sendAll(c.fd, add)) {
          fail(c, "send ADD failed");
          continue;
        }
        c.step = Step::kAdded;
        continue;
      }
      char buffer[64];
      ssize_t got = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (got <= 0) {
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        fail(c, "the server closed the connection");
        continue;
      }
      c.in.append(buffer, static_cast<size_t>(got));
      if (c.step == Step::kAdded && c.in.size() >= 8) {
        int64_t count = 0;
        std::memcpy(&count, c.in.data(), 8);
        c.in.erase(0, 8);
        // The client that brings the count to N sets the key everyone waits for.
        if (!sendAll(c.fd, count == n ? setLast + wait : wait)) {
          fail(c, "send WAIT failed");
          continue;
        }
        c.step = Step::kWaiting;
      }
      if (c.step == Step::kWaiting && !c.in.empty()) {
        c.step = c.in[0] == 0 ? Step::kDone : Step::kFailed;
        if (c.step == Step::kDone) {
          ++done;
        } else {
          fail(c, "unexpected WAIT reply");
        }
      }
    }
  }
  const double elapsed = seconds(Clock::now() - start);
  const int unfinished = n - done - failed;
  for (auto& c : clients) {
    if (c.fd >= 0) ::close(c.fd);
  }
  std::cout << "{\"clients\": " << n << ", \"woken\": " << done << ", \"errors\": " << failed + unfinished
            << ", \"seconds\": " << elapsed << ", \"first_error\": \""
            << (firstError.empty() && unfinished ? "timed out after 180 s" : firstError) << "\"}" << std::endl;
  return done == n ? 0 : 1;
}

// ---- latency --------------------------------------------------------------------------------------------

int latency(double duration, bool fresh) {
  std::vector<double> samples;
  int errors = 0;
  int fd = fresh ? -1 : connectTo();
  const std::string add = cmd(kAdd113) + str("normal/count") + u64(1);
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    if (fd < 0) fd = connectTo();
    char reply[8];
    const bool ok = fd >= 0 && sendAll(fd, add) && recvAll(fd, reply, 8, 10000);
    const auto t1 = Clock::now();
    if (!ok) {
      ++errors;
      if (fd >= 0) ::close(fd);
      fd = -1;
      std::this_thread::sleep_for(10ms);
      continue;
    }
    samples.push_back(seconds(t1 - t0) * 1000.0);
    if (fresh) {
      ::close(fd);
      fd = -1;
    }
    std::this_thread::sleep_for(1ms);  // a worker's pace, not a flood
  }
  std::sort(samples.begin(), samples.end());
  auto pct = [&](double p) { return samples.empty() ? -1.0 : samples[static_cast<size_t>(p * (samples.size() - 1))]; };
  std::cout << "{\"samples\": " << samples.size() << ", \"errors\": " << errors << ", \"p50_ms\": " << pct(0.5)
            << ", \"p99_ms\": " << pct(0.99) << ", \"max_ms\": " << pct(1.0) << "}" << std::endl;
  return 0;
}

// ---- attacks --------------------------------------------------------------------------------------------

void multigetBomb(Clock::time_point end) {
  // After one 1 MiB SET, a 45 KB MULTI_GET of that key 4,096 times asks for a 4 GiB reply.
  std::string bomb = cmd(kMultiGet2) + u64(4096);
  for (int i = 0; i < 4096; ++i) bomb += str("bomb/v");
  int setter = connectTo();
  sendAll(setter, kValidate2 + cmd(kSet2) + str("bomb/v") + str(std::string(1 << 20, 'x')));
  while (Clock::now() < end) {
    int fd = connectTo();
    if (fd < 0) break;
    sendAll(fd, kValidate2 + bomb);
    char c;
    recvAll(fd, &c, 1, 2000);
    ::close(fd);
  }
  ::close(setter);
}

void unreadReplies(Clock::time_point end) {
  // 20 connections ask for a 32 MiB value twice each and never read.
  int setter = connectTo();
  sendAll(setter, kValidate2 + cmd(kSet2) + str("unread/v") + str(std::string(32 << 20, 'x')));
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    int fd = connectTo();
    int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sendAll(fd, kValidate2 + cmd(kGet2) + str("unread/v") + cmd(kGet2) + str("unread/v"));
    fds.push_back(fd);
  }
  std::this_thread::sleep_until(end);
  for (int fd : fds) ::close(fd);
  ::close(setter);
}

void streamedCheck(Clock::time_point end) {
  // CHECK of 131,072 keys of 64 KiB each (8 GiB), streamed as fast as the server takes it.
  const std::string key = str(std::string(64 * 1024, 'k'));
  while (Clock::now() < end) {
    int fd = connectTo();
    if (fd < 0) break;
    bool ok = sendAll(fd, cmd(kCheck113) + u64(131072));
    for (int i = 0; ok && i < 131072 && Clock::now() < end; ++i) ok = sendAll(fd, key);
    ::close(fd);
  }
}

void dribble(Clock::time_point end) {
  // 200 connections each announce a WAIT of 100,000 keys, then send 50 bytes a second.
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    int fd = connectTo();
    if (fd >= 0 && sendAll(fd, cmd(kWait113) + u64(100000))) fds.push_back(fd);
  }
  while (Clock::now() < end) {
    for (int fd : fds) ::send(fd, "k", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    std::this_thread::sleep_for(20ms);
  }
  for (int fd : fds) ::close(fd);
}

void silent(Clock::time_point end) {
  // 1,100 connections send one byte and go quiet (more than a 1,024-descriptor limit).
  std::vector<int> fds;
  for (int i = 0; i < 1100; ++i) {
    int fd = connectTo();
    if (fd < 0) break;
    ::send(fd, "\x00", 1, MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  std::this_thread::sleep_until(end);
  for (int fd : fds) ::close(fd);
}

void slowClose(Clock::time_point end) {
  // One client waits on 131,072 keys; others connect and close in a loop.
  int waiter = connectTo();
  std::string wait = cmd(kWait113) + u64(131072);
  for (int i = 0; i < 131072; ++i) wait += str("never/" + std::to_string(i));
  sendAll(waiter, wait);
  while (Clock::now() < end) {
    int fd = connectTo();
    if (fd >= 0) ::close(fd);
  }
  ::close(waiter);
}

/// After one 60 MiB SET under `key`, connections send `request` (about `key`) and close at once until `end`: the
/// client pays a few bytes, the store a 60 MiB reply nobody reads unless it notices the close.
void closeAfterEachRequest(Clock::time_point end, const std::string& key, const std::string& request) {
  int setter = connectTo();
  sendAll(setter, kValidate2 + cmd(kSet2) + str(key) + str(std::string(60 << 20, 'x')));
  while (Clock::now() < end) {
    int fd = connectTo();
    if (fd < 0) break;
    sendAll(fd, request);
    ::close(fd);
  }
  ::close(setter);
}

void goneGets(Clock::time_point end) {
  // GETs of the 60 MiB value (12 bytes each).
  closeAfterEachRequest(end, "gone/v", kValidate2 + cmd(kGet2) + str("gone/v"));
}

void goneCompareSets(Clock::time_point end) {
  // COMPARE_SETs whose expected value differs: each reply is the stored 60 MiB value.
  closeAfterEachRequest(end, "gone/c", kValidate2 + cmd(kCompareSet2) + str("gone/c") + str("stale") + str("new"));
}

void fill(Clock::time_point end) {
  // SETs of 60 MiB under ever new keys until the store refuses (or dies: without a memory budget, about 48 end in
  // bad_alloc).
  const std::string value = str(std::string(60 << 20, 'f'));
  int key = 0;
  while (Clock::now() < end) {
    int fd = connectTo();
    if (fd < 0) break;
    bool ok = sendAll(fd, kValidate2);
    while (ok && Clock::now() < end) ok = sendAll(fd, cmd(kSet2) + str("fill/" + std::to_string(key++)) + value);
    ::close(fd);
    std::this_thread::sleep_for(100ms);
  }
}

int attack(const std::string& kind, double duration) {
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  if (kind == "multiget_bomb")
    multigetBomb(end);
  else if (kind == "unread_replies")
    unreadReplies(end);
  else if (kind == "streamed_check")
    streamedCheck(end);
  else if (kind == "dribble")
    dribble(end);
  else if (kind == "silent")
    silent(end);
  else if (kind == "slow_close")
    slowClose(end);
  else if (kind == "gone_cas")
    goneCompareSets(end);
  else if (kind == "gone_gets")
    goneGets(end);
  else if (kind == "fill")
    fill(end);
  else {
    std::cerr << "store_bench: unknown attack " << kind << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 3) gPort = static_cast<uint16_t>(std::stoi(args[1]));
  if (args.size() == 3 && args[0] == "storm") return storm(std::stoi(args[2]));
  if (args.size() >= 3 && args[0] == "latency")
    return latency(std::stod(args[2]), args.size() > 3 && args[3] == "fresh");
  if (args.size() == 4 && args[0] == "attack") return attack(args[2], std::stod(args[3]));
  std::cerr << "usage: store_bench storm PORT N | latency PORT SECONDS [fresh] | attack PORT KIND SECONDS\n";
  return 2;
}
