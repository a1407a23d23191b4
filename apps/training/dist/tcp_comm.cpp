// Socket communicator (apps/training/dist/tcp_comm.h): the rendezvous through rank 0, the mesh of
// TCP connections, the framed non-blocking progress engine (one poll() loop per wait) and the
// failure protocol: a rank that sees a peer die sends a FAIL frame naming it to every other peer
// and wakes its other threads, so that every rank's message names the rank that died.
#include "apps/training/dist/tcp_comm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "apps/training/dist/allreduce.h"

namespace training::dist {

// ---------------------------------------------------------------------------------------------
// Frames, clocks, small socket helpers

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x59394d53;  // "Y9MS"
enum Kind : uint32_t {
  kData = 1,   // len payload bytes follow
  kFail = 2,   // a = the rank that failed, b = Cause; len = exit code for kAborted
  kReg = 10,   // rendezvous: a = rank, b = world size; payload: RegPayload
  kAck = 11,   // rank 0 read the registration
  kTable = 12, // a = world size; payload: world_size x (u16 port, u16 addr length, addr bytes)
  kErr = 13,   // payload: the message text
  kHello = 14, // mesh: a = rank, b = mesh id, len = world size
};
enum Cause : int32_t { kClosed = 0, kAborted = 1, kTimedOut = 2, kSocketError = 3, kProtocol = 4 };

struct Frame {
  uint32_t magic = kMagic;
  uint32_t kind = kData;
  int32_t a = 0;
  int32_t b = 0;
  uint64_t len = 0;
};
static_assert(sizeof(Frame) == 24, "the frame header is 24 bytes on the wire");
constexpr size_t kHdr = sizeof(Frame);

struct RegPayload {
  uint64_t data_port;
  uint64_t run_hash;
};

// Linux caps one send/recv at about 2 GiB; bigger payloads take several calls.
constexpr size_t kMaxIo = size_t(1) << 30;


// Milliseconds until `deadline` for poll(), at least 0.
int ms_until(Clock::time_point deadline) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(d + 1, 0, 1 << 30));
}

std::string errno_text(int e) { return std::string(std::strerror(e)); }

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string fmt_seconds(double s) {
  char b[32];
  if (s == std::floor(s))
    std::snprintf(b, sizeof b, "%.0f s", s);
  else
    std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

std::string join_ints(const std::vector<int>& r) {
  std::string s;
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s;
}

std::string rank_list(const std::vector<int>& r) { return (r.size() == 1 ? "rank " : "ranks ") + join_ints(r); }

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The socket buffer size: 4 MiB when the system caps allow it; otherwise Linux's autotuning
// (which setting SO_SNDBUF / SO_RCVBUF would switch off) reaches tcp_wmem / tcp_rmem's maximum
// (4-6 MiB by default) on its own, while an explicit request would be cut to the cap (208 KiB).
int wanted_sockbuf(const char* proc_path) {
  constexpr int kWant = 4 << 20;
  std::FILE* f = std::fopen(proc_path, "r");
  if (!f) return 0;
  long v = 0;
  const bool ok = std::fscanf(f, "%ld", &v) == 1;
  std::fclose(f);
  return ok && v >= kWant ? kWant : 0;
}

// Options of a mesh connection: no Nagle delay (the ring's slices are latency-bound), big buffers,
// keepalive probes so that a peer machine that vanishes (power, network) ends an idle wait in
// about 25 s (a dead process is seen at once: its kernel closes the connection).
void tune_socket(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  static const int sndbuf = wanted_sockbuf("/proc/sys/net/core/wmem_max");
  static const int rcvbuf = wanted_sockbuf("/proc/sys/net/core/rmem_max");
  if (sndbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const int idle = 10, intvl = 5, cnt = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  set_nonblocking(fd);
}

std::string sockaddr_text(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
  else if (ss.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof buf);
  return buf;
}

int sockaddr_port(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  return sockaddr_port(ss);
}

int socket_family(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return AF_INET;
  return ss.ss_family;
}

// A listening socket on the wildcard address of `family` (IPv6: dual-stack) and `port` (0: an
// ephemeral one). Returns -1 with errno set.
int listen_on(int family, int port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1, zero = 0;
  // A port left in TIME_WAIT by a previous run may be reused; one held by a live listener may not.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    auto& a = reinterpret_cast<sockaddr_in6&>(ss);
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof a;
  } else {
    auto& a = reinterpret_cast<sockaddr_in&>(ss);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof a;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// Resolves host:port (numeric or by name). Returns the addresses, or an empty list with `err`.
std::vector<sockaddr_storage> resolve(const std::string& host, int port, std::string& err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  std::vector<sockaddr_storage> out;
  if (rc != 0) {
    err = ::gai_strerror(rc);
    return out;
  }
  for (addrinfo* p = res; p; p = p->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, p->ai_addr, p->ai_addrlen);
    out.push_back(ss);
  }
  ::freeaddrinfo(res);
  return out;
}

socklen_t sockaddr_len(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// One non-blocking connect attempt bounded by `deadline`. Returns the connected socket or -1 with
// `err` (errno of the failure).
int connect_once(const sockaddr_storage& ss, Clock::time_point deadline, int& err) {
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&ss), sockaddr_len(ss)) == 0) return fd;
  if (errno != EINPROGRESS) {
    err = errno;
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int rc;
  do rc = ::poll(&p, 1, ms_until(deadline));
  while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    err = ETIMEDOUT;
    ::close(fd);
    return -1;
  }
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
  if (soerr != 0) {
    err = soerr;
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads or writes exactly n bytes of a non-blocking socket before `deadline`. Returns 1 when done,
// 0 on EOF (read), -1 on error (errno) or at the deadline (errno = ETIMEDOUT).
int io_full(int fd, void* buf, size_t n, Clock::time_point deadline, bool write) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t k = write ? ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0 && !write) return 0;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    pollfd pf{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    const int rc = ::poll(&pf, 1, ms_until(deadline));
    if (rc == 0) {
      errno = ETIMEDOUT;
      return -1;
    }
  }
  return 1;
}

bool send_frame(int fd, const Frame& f, const void* payload, Clock::time_point deadline) {
  if (io_full(fd, const_cast<Frame*>(&f), kHdr, deadline, true) != 1) return false;
  return f.len == 0 || !payload || io_full(fd, const_cast<void*>(payload), f.len, deadline, true) == 1;
}

std::string cause_text(int culprit, int cause, int64_t code) {
  const std::string r = "rank " + std::to_string(culprit);
  switch (cause) {
    case kAborted: return r + " aborted (exit code " + std::to_string(code) + ")";
    case kTimedOut: return r + " stopped answering (its machine went down or the network was cut)";
    case kSocketError: return "the connection with " + r + " failed";
    case kProtocol: return r + " found that the ranks disagree (different collectives or message sizes)";
    default: return r + " closed its connection (it died or was killed)";
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// World: what the communicator and its duplicates share

struct TcpCommunicator::World {
  int rank = 0, size = 1;
  double timeout_s = 60;
  int listen_fd = -1;  // this rank's mesh listener, kept for duplicate()
  std::vector<std::string> addrs;  // where to reach each rank's listener
  std::vector<int> ports;
  std::array<int, 2> wake{-1, -1};  // written once when the world breaks: wakes every waiting thread
  std::mutex mu;
  std::atomic<bool> broken{false};
  int culprit = -1, cause = kClosed;
  int64_t code = 0;
  std::string cause_msg;  // "rank D closed its connection (...)"
  std::vector<Mesh*> meshes;
  int next_mesh = 0;
  std::mutex build_mu;

  std::string who() const { return "rank " + std::to_string(rank) + "/" + std::to_string(size); }
  ~World() {
    if (listen_fd >= 0) ::close(listen_fd);
    for (int fd : wake)
      if (fd >= 0) ::close(fd);
  }
  // Records the first failure; returns false when one was already recorded.
  bool record(int who_failed, int why, int64_t exit_code) {
    std::lock_guard<std::mutex> lock(mu);
    if (broken.load()) return false;
    culprit = who_failed, cause = why, code = exit_code;
    cause_msg = cause_text(who_failed, why, exit_code);
    broken.store(true);
    const char b = 1;
    if (wake[1] >= 0) [[maybe_unused]] auto r = ::write(wake[1], &b, 1);
    return true;
  }
};

// ---------------------------------------------------------------------------------------------
// Mesh: one connection per peer and the progress engine

struct TcpCommunicator::Mesh {
  struct SendItem {
    Frame hdr;
    const char* p;
    size_t len;
    int slot;
  };
  struct RecvItem {
    char* p;
    size_t len;
    int slot;
  };
  struct Conn {
    int fd = -1;
    std::deque<SendItem> sq;
    size_t s_off = 0;  // bytes of sq.front() (header + payload) written
    std::deque<RecvItem> rq;
    Frame rh;
    size_t r_off = 0;        // bytes of rq.front() (header + payload) read
    bool eof_seen = false;   // the peer closed while nothing was expected from it
    bool idle_data = false;  // data arrived that no receive has claimed yet
  };
  // Slots 0-3: start_sendrecv's exchanges (id % 4); slot 4: blocking calls and collectives.
  static constexpr int kBlocking = 4;

  World* world = nullptr;
  int id = 0;
  std::vector<Conn> conns;
  std::array<int, 5> outstanding{};
  int next_pending = 0;
  std::atomic<bool> busy{false};  // a thread is inside a call (abort() leaves its sockets alone)
  bool notified = false;          // our peers were told about the failure

  int rank() const { return world->rank; }
  std::string who() const { return world->who(); }

  ~Mesh() {
    if (world) {
      std::lock_guard<std::mutex> lock(world->mu);
      auto& m = world->meshes;
      m.erase(std::remove(m.begin(), m.end(), this), m.end());
    }
    for (auto& c : conns)
      if (c.fd >= 0) ::close(c.fd);
  }

  void queue_send(int peer, const void* p, size_t len, int slot) {
    Frame h;
    h.len = len;
    conns[peer].sq.push_back({h, static_cast<const char*>(p), len, slot});
    ++outstanding[slot];
  }
  void queue_recv(int peer, void* p, size_t len, int slot) {
    conns[peer].rq.push_back({static_cast<char*>(p), len, slot});
    ++outstanding[slot];
  }

  // --- failures --------------------------------------------------------------------------------

  // Tells every peer (but `skip`) which rank failed, best effort within ~2 s in all: a frame half
  // written is finished first (its buffer is still ours: we are inside the call that queued it).
  void notify_peers(int skip) {
    if (notified) return;
    notified = true;
    Frame f;
    f.kind = kFail;
    {
      std::lock_guard<std::mutex> lock(world->mu);
      f.a = world->culprit, f.b = world->cause, f.len = static_cast<uint64_t>(world->code);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    for (int p = 0; p < static_cast<int>(conns.size()); ++p) {
      Conn& c = conns[p];
      if (c.fd < 0 || p == skip || p == f.a) continue;
      if (!c.sq.empty() && c.s_off > 0) {
        SendItem& it = c.sq.front();
        if (c.s_off < kHdr && io_full(c.fd, reinterpret_cast<char*>(&it.hdr) + c.s_off, kHdr - c.s_off, deadline, true) != 1)
          continue;
        const size_t poff = c.s_off > kHdr ? c.s_off - kHdr : 0;
        if (it.len > poff && io_full(c.fd, const_cast<char*>(it.p) + poff, it.len - poff, deadline, true) != 1) continue;
      }
      c.sq.clear();
      c.s_off = 0;
      io_full(c.fd, &f, kHdr, deadline, true);
    }
  }

  [[noreturn]] void throw_broken(const char* op, int peer, int reporter) {
    notify_peers(reporter);
    std::string msg;
    {
      std::lock_guard<std::mutex> lock(world->mu);
      if (peer >= 0) {
        msg = who() + ": " + op + " with rank " + std::to_string(peer) + " failed: " + world->cause_msg;
        if (reporter >= 0 && reporter != world->culprit) msg += "; rank " + std::to_string(reporter) + " reported it";
      } else {
        msg = who() + ": " + op + " failed: " + world->cause_msg;
      }
    }
    Y9_THROW(CommError, msg);
  }

  // A FAIL frame that `peer` sent before its connection ended and that we have not read yet (it
  // may sit behind data nobody asked for, e.g. when our send to it failed first). Looks at up to
  // 1 MiB of what is queued, frame by frame, without consuming it; false when there is none.
  bool peek_fail(int peer, Frame& out) {
    Conn& c = conns[peer];
    if (c.fd < 0 || c.r_off != 0) return false;  // a frame is half read: no header boundary here
    std::vector<char> buf(size_t(1) << 20);
    const ssize_t k = ::recv(c.fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
    size_t off = 0;
    while (k > 0 && off + kHdr <= static_cast<size_t>(k)) {
      Frame h;
      std::memcpy(&h, buf.data() + off, kHdr);
      if (h.magic != kMagic) return false;
      if (h.kind == kFail) {
        out = h;
        return true;
      }
      off += kHdr + h.len;
    }
    return false;
  }

  // The peer's connection ended (EOF, reset, broken pipe, keepalive timeout): it is the culprit,
  // unless it told us before leaving that another rank is.
  [[noreturn]] void peer_lost(const char* op, int peer, int err) {
    if (Frame f; peek_fail(peer, f)) peer_reported(op, peer, f);
    const int cause = err == ETIMEDOUT || err == EHOSTUNREACH ? kTimedOut : kClosed;
    if (!world->record(peer, cause, 0)) throw_broken(op, peer, -1);
    if (err != 0 && err != ECONNRESET && err != EPIPE && cause == kClosed) {
      std::lock_guard<std::mutex> lock(world->mu);
      world->cause = kSocketError;
      world->cause_msg = cause_text(peer, kSocketError, 0) + ": " + errno_text(err);
    }
    throw_broken(op, peer, -1);
  }

  // A FAIL frame from `peer`: rank f.a failed (seen by `peer`, or `peer` itself aborted).
  [[noreturn]] void peer_reported(const char* op, int peer, const Frame& f) {
    world->record(f.a, f.b, static_cast<int64_t>(f.len));
    throw_broken(op, peer, peer);
  }

  [[noreturn]] void protocol_error(const char* op, int peer, const std::string& what) {
    // Not a death: the ranks disagree (different collectives or sizes). Still fatal for all.
    std::string msg = who() + ": " + op + " with rank " + std::to_string(peer) + " failed: " + what;
    {
      std::lock_guard<std::mutex> lock(world->mu);
      if (!world->broken.load()) {
        world->culprit = rank(), world->cause = kProtocol, world->code = 0;
        world->cause_msg = "rank " + std::to_string(rank()) + " found a protocol error with rank " +
                           std::to_string(peer) + ": " + what;
        world->broken.store(true);
        const char b = 1;
        [[maybe_unused]] auto r = ::write(world->wake[1], &b, 1);
      }
    }
    notify_peers(-1);
    Y9_THROW(CommError, msg);
  }

  // --- progress --------------------------------------------------------------------------------

  void io_send(int p, const char* op) {
    Conn& c = conns[p];
    while (!c.sq.empty()) {
      SendItem& it = c.sq.front();
      iovec iov[2];
      int n = 0;
      if (c.s_off < kHdr) iov[n++] = {reinterpret_cast<char*>(&it.hdr) + c.s_off, kHdr - c.s_off};
      const size_t poff = c.s_off > kHdr ? c.s_off - kHdr : 0;
      if (it.len > poff) iov[n++] = {const_cast<char*>(it.p) + poff, std::min(it.len - poff, kMaxIo)};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = static_cast<size_t>(n);
      const ssize_t k = ::sendmsg(c.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        peer_lost(op, p, errno);
      }
      c.s_off += static_cast<size_t>(k);
      if (c.s_off == kHdr + it.len) {
        --outstanding[it.slot];
        c.sq.pop_front();
        c.s_off = 0;
      }
    }
  }

  void check_header(const char* op, int p, const Frame& h, size_t expected) {
    if (h.magic != kMagic) protocol_error(op, p, "received bytes that are not a yolov9 message (corrupted stream)");
    if (h.kind == kFail) peer_reported(op, p, h);
    if (h.kind != kData) protocol_error(op, p, "unexpected message kind " + std::to_string(h.kind));
    if (h.len != expected)
      protocol_error(op, p,
                     "expected a message of " + std::to_string(expected) + " bytes, got one of " + std::to_string(h.len) +
                         " bytes (the ranks called different collectives or sizes)");
  }

  void io_recv(int p, const char* op) {
    Conn& c = conns[p];
    while (!c.rq.empty()) {
      RecvItem& it = c.rq.front();
      iovec iov[2];
      int n = 0;
      if (c.r_off < kHdr) iov[n++] = {reinterpret_cast<char*>(&c.rh) + c.r_off, kHdr - c.r_off};
      const size_t poff = c.r_off > kHdr ? c.r_off - kHdr : 0;
      // Reading into the payload before the header is checked is safe: a header that does not
      // match (another size, a FAIL) is an error that ends the call.
      if (it.len > poff) iov[n++] = {it.p + poff, std::min(it.len - poff, kMaxIo)};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = static_cast<size_t>(n);
      const ssize_t k = ::recvmsg(c.fd, &m, MSG_DONTWAIT);
      if (k == 0) peer_lost(op, p, 0);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        peer_lost(op, p, errno);
      }
      const size_t before = c.r_off;
      c.r_off += static_cast<size_t>(k);
      if (before < kHdr && c.r_off >= kHdr) check_header(op, p, c.rh, it.len);
      if (c.r_off == kHdr + it.len) {
        --outstanding[it.slot];
        c.rq.pop_front();
        c.r_off = 0;
        c.idle_data = false;  // what follows may be a FAIL frame: watch again
      }
    }
  }

  // A peer we expect nothing from woke poll(): a FAIL frame ends the call; data is left for the
  // receive that will claim it; an EOF is remembered (the peer may just have finished its work).
  void check_idle(int p, const char* op) {
    Conn& c = conns[p];
    Frame h;
    const ssize_t k = ::recv(c.fd, &h, kHdr, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      c.eof_seen = true;
      return;
    }
    if (k == static_cast<ssize_t>(kHdr) && h.magic == kMagic && h.kind == kFail) {
      [[maybe_unused]] auto r = ::recv(c.fd, &h, kHdr, MSG_DONTWAIT);
      peer_reported(op, p, h);
    }
    if (k > 0) c.idle_data = true;
  }

  // Moves bytes until slot `slot` has nothing outstanding. No deadline; ends on a failure.
  void progress(int slot, const char* op) {
    busy.store(true);
    struct Clear {
      std::atomic<bool>& b;
      ~Clear() { b.store(false); }
    } clear{busy};
    const int n = static_cast<int>(conns.size());
    std::vector<pollfd> pfd;
    std::vector<int> who_fd;
    for (;;) {
      if (world->broken.load()) throw_broken(op, -1, -1);
      for (int p = 0; p < n; ++p) {
        if (conns[p].fd < 0) continue;
        if (!conns[p].sq.empty()) io_send(p, op);
        if (!conns[p].rq.empty()) io_recv(p, op);
      }
      if (outstanding[slot] == 0) return;
      pfd.clear();
      who_fd.clear();
      for (int p = 0; p < n; ++p) {
        Conn& c = conns[p];
        if (c.fd < 0) continue;
        short ev = 0;
        if (!c.sq.empty()) ev |= POLLOUT;
        if (!c.rq.empty() || (!c.idle_data && !c.eof_seen)) ev |= POLLIN;
        if (ev == 0) continue;
        pfd.push_back({c.fd, ev, 0});
        who_fd.push_back(p);
      }
      pfd.push_back({world->wake[0], POLLIN, 0});
      who_fd.push_back(-1);
      const int rc = ::poll(pfd.data(), pfd.size(), -1);
      if (rc < 0 && errno != EINTR) Y9_THROW(CommError, who(), ": ", op, ": poll failed: ", errno_text(errno));
      for (size_t i = 0; i + 1 < pfd.size(); ++i) {
        const int p = who_fd[i];
        Conn& c = conns[p];
        if (pfd[i].revents && c.rq.empty() && !c.idle_data && !c.eof_seen) check_idle(p, op);
      }
    }
  }

  // Pushes what the socket buffers take now, without waiting.
  void kick(int p, const char* op) {
    if (world->broken.load()) throw_broken(op, -1, -1);
    if (!conns[p].sq.empty()) io_send(p, op);
    if (!conns[p].rq.empty()) io_recv(p, op);
  }
};

// ---------------------------------------------------------------------------------------------
// Rendezvous and mesh construction

namespace {

using World = TcpCommunicator::World;
using Mesh = TcpCommunicator::Mesh;

std::string endpoint(const std::string& addr, int port) {
  return (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + std::to_string(port);
}

std::string busy_port_text(const TcpWorldOptions& o) {
  const std::string p = std::to_string(o.master_port);
  std::string s = "port " + p + " is already in use; another run may hold it. ";
  if (o.port_source == "--master-port")
    s += "Pick another port with --master-port, or omit --master-port and yolov9 picks a free one";
  else if (o.port_source == "MASTER_PORT+1")
    s += "yolov9 listens on MASTER_PORT+1 under torchrun (torchrun's own store holds MASTER_PORT); start torchrun "
         "with another --master-port";
  else
    s += "Set MASTER_PORT to a free port (or, with `yolov9 train --device ...`, omit --master-port and yolov9 "
         "picks a free one)";
  return s;
}

// Rank 0: wait for every rank's registration, then send the table. Fills w.addrs / w.ports.
void rendezvous_host(World& w, const TcpWorldOptions& o, int store_fd, const std::string& where) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  struct Client {
    int fd;
    std::string addr;
    std::vector<char> buf;  // header + payload read so far
  };
  std::vector<Client> pending;
  std::vector<int> reg_fd(static_cast<size_t>(w.size), -1);
  std::vector<std::string> reg_addr(static_cast<size_t>(w.size));
  int joined = 1;
  const uint64_t run_hash = o.run_id.empty() ? 0 : fnv1a(o.run_id);

  auto close_all = [&] {
    for (auto& c : pending) ::close(c.fd);
    for (int fd : reg_fd)
      if (fd >= 0) ::close(fd);
  };
  // A fatal rendezvous error: every rank that joined gets the same message.
  auto fail = [&](const std::string& text) {
    const auto d = Clock::now() + std::chrono::seconds(2);
    for (int fd : reg_fd) {
      if (fd < 0) continue;
      Frame f;
      f.kind = kErr;
      f.len = text.size();
      send_frame(fd, f, text.data(), d);
    }
    close_all();
    Y9_THROW(CommError, w.who(), ": rendezvous at ", where, " failed: ", text);
  };

  while (joined < w.size) {
    std::vector<pollfd> pfd{{store_fd, POLLIN, 0}};
    for (auto& c : pending) pfd.push_back({c.fd, POLLIN, 0});
    const int rc = ::poll(pfd.data(), pfd.size(), ms_until(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0 || Clock::now() >= deadline) {
      std::vector<int> missing, present;
      for (int r = 0; r < w.size; ++r) (r == 0 || reg_fd[static_cast<size_t>(r)] >= 0 ? present : missing).push_back(r);
      fail(rank_list(missing) + " did not join within " + fmt_seconds(o.timeout_s) + " (joined: " +
           join_ints(present) + "). Check that every rank was started, with the "
           "same MASTER_ADDR, MASTER_PORT and WORLD_SIZE=" + std::to_string(w.size) +
           " (Y9_DIST_TIMEOUT_S sets this deadline)");
    }
    if (pfd[0].revents & POLLIN) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept4(store_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) pending.push_back({fd, sockaddr_text(ss), {}});
    }
    for (size_t i = 1; i < pfd.size(); ++i) {
      if (!pfd[i].revents) continue;
      Client& c = pending[i - 1];
      const size_t want = c.buf.size() < kHdr ? kHdr : kHdr + sizeof(RegPayload);
      const size_t have = c.buf.size();
      c.buf.resize(want);
      const ssize_t k = ::recv(c.fd, c.buf.data() + have, want - have, MSG_DONTWAIT);
      c.buf.resize(have + static_cast<size_t>(std::max<ssize_t>(k, 0)));
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(c.fd);  // a client that left before registering (a port probe, a killed rank)
        c.fd = -1;
        continue;
      }
      if (c.buf.size() < kHdr) continue;
      Frame h;
      std::memcpy(&h, c.buf.data(), kHdr);
      if (h.magic != kMagic || h.kind != kReg) {  // not one of ours: ignore it
        ::close(c.fd);
        c.fd = -1;
        continue;
      }
      if (c.buf.size() < kHdr + sizeof(RegPayload)) continue;
      RegPayload rp;
      std::memcpy(&rp, c.buf.data() + kHdr, sizeof rp);
      const int r = h.a;
      if (rp.run_hash != run_hash) {
        const std::string text = "rank 0 at " + where + " belongs to another run (a different run id); this port is "
                                 "taken by that run";
        Frame f;
        f.kind = kErr;
        f.len = text.size();
        send_frame(c.fd, f, text.data(), Clock::now() + std::chrono::seconds(2));
        ::close(c.fd);
        c.fd = -1;
        continue;
      }
      if (h.b != w.size) {
        const int fd = c.fd;
        c.fd = -1;
        reg_fd.push_back(fd);  // so that it gets the message too
        fail("rank " + std::to_string(r) + " (from " + c.addr + ") has WORLD_SIZE=" + std::to_string(h.b) +
             " but rank 0 has WORLD_SIZE=" + std::to_string(w.size) + "; every rank must get the same WORLD_SIZE");
      }
      if (r <= 0 || r >= w.size) {
        reg_fd.push_back(c.fd);
        c.fd = -1;
        fail("a process from " + c.addr + " registered as rank " + std::to_string(r) + ", which is not in 1.." +
             std::to_string(w.size - 1) + " (two processes with RANK=0?)");
      }
      if (reg_fd[static_cast<size_t>(r)] >= 0) {
        reg_fd.push_back(c.fd);
        c.fd = -1;
        fail("two processes registered as rank " + std::to_string(r) + " (from " + reg_addr[static_cast<size_t>(r)] +
             " and " + c.addr + "); every rank needs its own RANK");
      }
      Frame ack;
      ack.kind = kAck;
      ack.b = w.size;
      send_frame(c.fd, ack, nullptr, Clock::now() + std::chrono::seconds(2));
      reg_fd[static_cast<size_t>(r)] = c.fd;
      reg_addr[static_cast<size_t>(r)] = c.addr;
      w.ports[static_cast<size_t>(r)] = static_cast<int>(rp.data_port);
      c.fd = -1;
      ++joined;
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Client& c) { return c.fd < 0; }),
                  pending.end());
  }
  for (int r = 1; r < w.size; ++r) w.addrs[static_cast<size_t>(r)] = reg_addr[static_cast<size_t>(r)];
  // The table: per rank, port (u16), address length (u16), address bytes. Rank 0's address is
  // empty: the others reach it at MASTER_ADDR, as they reached the rendezvous.
  std::vector<char> table;
  for (int r = 0; r < w.size; ++r) {
    const std::string& a = w.addrs[static_cast<size_t>(r)];
    const uint16_t port = static_cast<uint16_t>(w.ports[static_cast<size_t>(r)]), n = static_cast<uint16_t>(a.size());
    table.insert(table.end(), reinterpret_cast<const char*>(&port), reinterpret_cast<const char*>(&port) + 2);
    table.insert(table.end(), reinterpret_cast<const char*>(&n), reinterpret_cast<const char*>(&n) + 2);
    table.insert(table.end(), a.begin(), a.end());
  }
  Frame f;
  f.kind = kTable;
  f.a = w.size;
  f.len = table.size();
  for (int r = 1; r < w.size; ++r) {
    if (!send_frame(reg_fd[static_cast<size_t>(r)], f, table.data(), Clock::now() + std::chrono::seconds(10))) {
      const int e = errno;
      close_all();
      Y9_THROW(CommError, w.who(), ": rendezvous at ", where, " failed: sending the table to rank ", r,
               " failed: ", errno_text(e), " (", cause_text(r, kClosed, 0), ")");
    }
  }
  close_all();
}

// Ranks 1..W-1: register with rank 0 and receive the table.
void rendezvous_join(World& w, const TcpWorldOptions& o, const std::string& where) {
  const auto t0 = Clock::now();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  const auto deadline = t0 + timeout;
  std::string gai_err;
  int fd = -1, last_err = 0;
  // Rank 0 may start after us: retry until the deadline (nothing to poll on before it listens).
  while (fd < 0) {
    const auto addrs = resolve(o.master_addr, o.master_port, gai_err);
    if (addrs.empty())
      Y9_THROW(CommError, w.who(), ": cannot resolve MASTER_ADDR=", o.master_addr, ": ", gai_err);
    for (const auto& a : addrs) {
      fd = connect_once(a, deadline, last_err);
      if (fd >= 0) break;
    }
    if (fd >= 0) break;
    if (Clock::now() >= deadline)
      Y9_THROW(CommError, w.who(), ": could not reach rank 0 at ", where, " within ", fmt_seconds(o.timeout_s),
               " (last error: ", errno_text(last_err), "): rank 0 did not start or failed (see its message), or "
               "MASTER_ADDR / MASTER_PORT differ between the ranks");
    ::poll(nullptr, 0, std::min(100, ms_until(deadline)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  w.listen_fd = listen_on(socket_family(fd), 0);
  if (w.listen_fd < 0) Y9_THROW(CommError, w.who(), ": cannot open a listening socket: ", errno_text(errno));
  Frame reg;
  reg.kind = kReg;
  reg.a = w.rank;
  reg.b = w.size;
  reg.len = sizeof(RegPayload);
  const RegPayload rp{static_cast<uint64_t>(local_port(w.listen_fd)), o.run_id.empty() ? 0 : fnv1a(o.run_id)};
  if (!send_frame(fd, reg, &rp, Clock::now() + std::chrono::seconds(5)))
    Y9_THROW(CommError, w.who(), ": registering with rank 0 at ", where, " failed: ", errno_text(errno));
  // Reads one frame (and its payload) from rank 0 before `d`.
  auto read_frame = [&](Clock::time_point d, std::vector<char>& payload, const char* waiting_for) -> Frame {
    Frame h;
    int rc = io_full(fd, &h, kHdr, d, false);
    if (rc == 1 && h.magic != kMagic) {
      rc = -1;
      errno = EPROTO;
    }
    if (rc == 1 && h.len > 0) {
      payload.resize(h.len);
      rc = io_full(fd, payload.data(), h.len, d, false);
    }
    if (rc == 1) return h;
    if (rc == 0)
      Y9_THROW(CommError, w.who(), ": rendezvous at ", where, " failed: rank 0 closed the connection before ",
               waiting_for, " (it died or was killed, or it failed: see its message)");
    if (errno == ETIMEDOUT && std::string(waiting_for) == "answering")
      Y9_THROW(CommError, w.who(), ": the process listening on ", where, " did not answer as rank 0 of a yolov9 run "
               "within ", fmt_seconds(o.timeout_s), ": rank 0 did not join in time, or another program or another run "
               "may hold port ", o.master_port);
    Y9_THROW(CommError, w.who(), ": rendezvous at ", where, " failed while ", waiting_for, ": ", errno_text(errno));
  };
  std::vector<char> payload;
  // Rank 0 answers when it reaches its rendezvous, which may be a while after we connected (the
  // local spawner holds the port for it from the start): the join deadline applies.
  Frame h = read_frame(deadline, payload, "answering");
  const auto acked = Clock::now();
  if (h.kind == kAck) h = read_frame(acked + timeout + std::chrono::seconds(5), payload, "sending the table");
  if (h.kind == kErr)
    Y9_THROW(CommError, w.who(), ": rendezvous at ", where, " failed: rank 0 reports: ",
             std::string(payload.begin(), payload.end()));
  if (h.kind != kTable || h.a != w.size)
    Y9_THROW(CommError, w.who(), ": rendezvous at ", where, " failed: unexpected answer from rank 0 (kind ", h.kind, ")");
  size_t off = 0;
  for (int r = 0; r < w.size; ++r) {
    uint16_t port = 0, n = 0;
    Y9_ASSERT(off + 4 <= payload.size(), "rendezvous table truncated");
    std::memcpy(&port, payload.data() + off, 2);
    std::memcpy(&n, payload.data() + off + 2, 2);
    off += 4;
    Y9_ASSERT(off + n <= payload.size(), "rendezvous table truncated");
    w.addrs[static_cast<size_t>(r)] = std::string(payload.data() + off, n);
    w.ports[static_cast<size_t>(r)] = port;
    off += n;
  }
  w.addrs[0] = o.master_addr;
}

// Connects mesh `mesh_id`: rank r connects to every rank below it and accepts every rank above it
// (listeners exist before anyone connects and have a SOMAXCONN backlog, so connects finish without
// the accept and nothing waits in a cycle).
std::vector<int> build_mesh(World& w, int mesh_id) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(w.timeout_s));
  std::vector<int> fds(static_cast<size_t>(w.size), -1);
  auto cleanup = [&] {
    for (int& fd : fds)
      if (fd >= 0) ::close(fd), fd = -1;
  };
  for (int j = 0; j < w.rank; ++j) {
    std::string err;
    const auto addrs = resolve(w.addrs[static_cast<size_t>(j)], w.ports[static_cast<size_t>(j)], err);
    int fd = -1, e = 0;
    for (const auto& a : addrs)
      if ((fd = connect_once(a, deadline, e)) >= 0) break;
    if (fd < 0) {
      cleanup();
      Y9_THROW(CommError, w.who(), ": connecting to rank ", j, " at ",
               endpoint(w.addrs[static_cast<size_t>(j)], w.ports[static_cast<size_t>(j)]), " failed: ",
               addrs.empty() ? err : errno_text(e), e == ECONNREFUSED ? " (it died or was killed)" : "");
    }
    Frame hello;
    hello.kind = kHello;
    hello.a = w.rank;
    hello.b = mesh_id;
    hello.len = static_cast<uint64_t>(w.size);
    if (!send_frame(fd, hello, nullptr, deadline)) {
      const int e2 = errno;
      ::close(fd);
      cleanup();
      Y9_THROW(CommError, w.who(), ": greeting rank ", j, " failed: ", errno_text(e2), " (",
               cause_text(j, kClosed, 0), ")");
    }
    fds[static_cast<size_t>(j)] = fd;
  }
  int expected = w.size - 1 - w.rank;
  while (expected > 0) {
    pollfd p{w.listen_fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, ms_until(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      std::vector<int> missing;
      for (int j = w.rank + 1; j < w.size; ++j)
        if (fds[static_cast<size_t>(j)] < 0) missing.push_back(j);
      cleanup();
      Y9_THROW(CommError, w.who(), ": ", rank_list(missing), " did not connect within ", fmt_seconds(w.timeout_s),
               " (connection mesh ", mesh_id, "; they died or were killed, or are stuck before this point)");
    }
    const int fd = ::accept4(w.listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    Frame h;
    const int got = io_full(fd, &h, kHdr, deadline, false);
    if (got != 1 || h.magic != kMagic || h.kind != kHello) {  // a probe or a rank that died: ignore
      ::close(fd);
      continue;
    }
    const int j = h.a;
    if (h.b != mesh_id || j <= w.rank || j >= w.size || fds[static_cast<size_t>(j)] >= 0 ||
        h.len != static_cast<uint64_t>(w.size)) {
      ::close(fd);
      cleanup();
      Y9_THROW(CommError, w.who(), ": rank ", j, " connected for connection mesh ", h.b, " while this rank builds mesh ",
               mesh_id, " (duplicate() called in a different order on the ranks?)");
    }
    fds[static_cast<size_t>(j)] = fd;
    --expected;
  }
  for (int fd : fds)
    if (fd >= 0) tune_socket(fd);
  return fds;
}

std::unique_ptr<Mesh> make_mesh(World& w) {
  std::lock_guard<std::mutex> build(w.build_mu);
  auto m = std::make_unique<Mesh>();
  m->id = w.next_mesh++;
  const std::vector<int> fds = build_mesh(w, m->id);
  m->conns.resize(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) m->conns[i].fd = fds[i];
  m->world = &w;
  std::lock_guard<std::mutex> lock(w.mu);
  w.meshes.push_back(m.get());
  return m;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TcpCommunicator

double dist_timeout_s() {
  const char* e = std::getenv("Y9_DIST_TIMEOUT_S");
  if (!e || !*e) return 60.0;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  if (end == e || *end != '\0' || !(v > 0) || !std::isfinite(v))
    Y9_THROW(engine::ConfigError, "Y9_DIST_TIMEOUT_S=", e, " is not a positive number of seconds");
  return v;
}

TcpCommunicator::TcpCommunicator(std::shared_ptr<World> world, std::unique_ptr<Mesh> mesh)
    : Communicator(world->rank, world->size), world_(std::move(world)), mesh_(std::move(mesh)) {}

TcpCommunicator::~TcpCommunicator() { mesh_.reset(); }

std::unique_ptr<TcpCommunicator> TcpCommunicator::create(const TcpWorldOptions& o) {
  Y9_CHECK_T(engine::ConfigError, o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, "socket world: rank ",
             o.rank, " is not in [0, ", o.world_size, ")");
  Y9_CHECK_T(engine::ConfigError, o.master_port >= 1 && o.master_port <= 65535, "socket world: ", o.port_source, "=",
             o.master_port, " is not a port (1-65535)");
  Y9_CHECK_T(engine::ConfigError, o.timeout_s > 0, "socket world: timeout ", o.timeout_s, " s is not positive");
  auto w = std::make_shared<World>();
  w->rank = o.rank;
  w->size = o.world_size;
  w->timeout_s = o.timeout_s;
  w->addrs.assign(static_cast<size_t>(o.world_size), "");
  w->ports.assign(static_cast<size_t>(o.world_size), 0);
  if (::pipe2(w->wake.data(), O_CLOEXEC | O_NONBLOCK) != 0)
    Y9_THROW(CommError, w->who(), ": pipe2 failed: ", errno_text(errno));
  const std::string where = endpoint(o.master_addr, o.master_port);
  if (o.world_size > 1) {
    if (o.rank == 0) {
      int store_fd = o.listen_fd;
      if (store_fd >= 0) {
        int listening = 0;
        socklen_t sl = sizeof listening;
        const bool ok = ::getsockopt(store_fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &sl) == 0 && listening &&
                        local_port(store_fd) == o.master_port;
        Y9_CHECK_T(engine::ConfigError, ok, "socket world: the inherited socket ", store_fd,
                   " is not listening on port ", o.master_port);
        ::fcntl(store_fd, F_SETFD, FD_CLOEXEC);
      } else {
        std::string err;
        const auto addrs = resolve(o.master_addr, o.master_port, err);
        if (addrs.empty()) Y9_THROW(CommError, w->who(), ": cannot resolve MASTER_ADDR=", o.master_addr, ": ", err);
        store_fd = listen_on(addrs[0].ss_family, o.master_port);
        if (store_fd < 0) {
          const int e = errno;
          if (e == EADDRINUSE)
            Y9_THROW(CommError, w->who(), ": cannot listen on ", o.port_source, "=", o.master_port, " (MASTER_ADDR=",
                     o.master_addr, "): ", busy_port_text(o));
          Y9_THROW(CommError, w->who(), ": cannot listen on ", o.port_source, "=", o.master_port, " (MASTER_ADDR=",
                   o.master_addr, "): ", errno_text(e), e == EACCES ? " (ports below 1024 need privileges)" : "");
        }
      }
      struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
      } closer{store_fd};
      w->listen_fd = listen_on(socket_family(store_fd), 0);
      if (w->listen_fd < 0) Y9_THROW(CommError, w->who(), ": cannot open a listening socket: ", errno_text(errno));
      w->ports[0] = local_port(w->listen_fd);
      rendezvous_host(*w, o, store_fd, where);
    } else {
      rendezvous_join(*w, o, where);
    }
  }
  auto mesh = make_mesh(*w);
  return std::unique_ptr<TcpCommunicator>(new TcpCommunicator(std::move(w), std::move(mesh)));
}

std::unique_ptr<Communicator> TcpCommunicator::duplicate() {
  if (world_->broken.load()) mesh_->throw_broken("duplicate", -1, -1);
  auto mesh = make_mesh(*world_);
  return std::unique_ptr<Communicator>(new TcpCommunicator(world_, std::move(mesh)));
}

void TcpCommunicator::send(const void* buf, size_t bytes, int peer) {
  Y9_CHECK(peer >= 0 && peer < world_size() && peer != rank(), who(), ": send to invalid peer ", peer);
  mesh_->queue_send(peer, buf, bytes, Mesh::kBlocking);
  mesh_->progress(Mesh::kBlocking, "send");
}

void TcpCommunicator::recv(void* buf, size_t bytes, int peer) {
  Y9_CHECK(peer >= 0 && peer < world_size() && peer != rank(), who(), ": recv from invalid peer ", peer);
  mesh_->queue_recv(peer, buf, bytes, Mesh::kBlocking);
  mesh_->progress(Mesh::kBlocking, "recv");
}

Pending TcpCommunicator::start_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src) {
  const int id = mesh_->next_pending++;
  const int slot = id % 4;
  Y9_ASSERT(mesh_->outstanding[slot] == 0, "more than 4 exchanges started and not waited");
  if (rbytes > 0) {
    Y9_CHECK(src >= 0 && src < world_size() && src != rank(), who(), ": receive from invalid peer ", src);
    mesh_->queue_recv(src, rbuf, rbytes, slot);
  }
  if (sbytes > 0) {
    Y9_CHECK(dst >= 0 && dst < world_size() && dst != rank(), who(), ": send to invalid peer ", dst);
    mesh_->queue_send(dst, sbuf, sbytes, slot);
  }
  if (sbytes > 0) mesh_->kick(dst, "sendrecv");
  if (rbytes > 0 && src != dst) mesh_->kick(src, "sendrecv");
  return Pending{id};
}

void TcpCommunicator::wait(Pending p) {
  Y9_ASSERT(p.id >= 0 && p.id < mesh_->next_pending && p.id + 4 >= mesh_->next_pending, "wait on an unknown exchange ",
            p.id);
  const int slot = p.id % 4;
  if (mesh_->outstanding[slot] > 0) mesh_->progress(slot, "sendrecv");
}

void TcpCommunicator::broadcast(void* buf, size_t bytes, int root) {
  Y9_CHECK(root >= 0 && root < world_size(), who(), ": broadcast from invalid root ", root);
  if (bytes == 0 || world_size() == 1) return;
  const int W = world_size(), v = (rank() - root + W) % W;  // rank relative to the root
  int mask = 1;
  for (; mask < W; mask <<= 1) {
    if (v & mask) {  // receive from the parent, then forward below
      mesh_->queue_recv((v - mask + root) % W, buf, bytes, Mesh::kBlocking);
      mesh_->progress(Mesh::kBlocking, "broadcast");
      break;
    }
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < W) mesh_->queue_send((v + mask + root) % W, buf, bytes, Mesh::kBlocking);
  mesh_->progress(Mesh::kBlocking, "broadcast");
}

void TcpCommunicator::barrier() {
  const int W = world_size();
  for (int k = 1; k < W; k <<= 1) {
    mesh_->queue_recv((rank() - k + W) % W, nullptr, 0, Mesh::kBlocking);
    mesh_->queue_send((rank() + k) % W, nullptr, 0, Mesh::kBlocking);
    mesh_->progress(Mesh::kBlocking, "barrier");
  }
}

void TcpCommunicator::all_gather(const void* sbuf, size_t bytes, void* rbuf) {
  auto* out = static_cast<char*>(rbuf);
  if (bytes == 0) return;
  if (out + static_cast<size_t>(rank()) * bytes != sbuf) std::memmove(out + static_cast<size_t>(rank()) * bytes, sbuf, bytes);
  const char* mine = out + static_cast<size_t>(rank()) * bytes;
  for (int p = 0; p < world_size(); ++p) {
    if (p == rank()) continue;
    mesh_->queue_recv(p, out + static_cast<size_t>(p) * bytes, bytes, Mesh::kBlocking);
    mesh_->queue_send(p, mine, bytes, Mesh::kBlocking);
  }
  mesh_->progress(Mesh::kBlocking, "all_gather");
}

void TcpCommunicator::all_reduce_library(void* buf, int64_t count, engine::DType dtype, ReduceOp op) {
  ring_all_reduce(*this, buf, count, dtype, op);
}

void TcpCommunicator::abort(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  World& w = *world_;
  // Peers that wait on us read the FAIL frame and name us with the exit code; a mesh whose thread
  // is inside a call may be half-way through a frame, so it only gets the shutdown (an EOF).
  std::unique_lock<std::mutex> lock(w.mu, std::try_to_lock);
  Frame f;
  f.kind = kFail;
  f.a = w.rank;
  f.b = kAborted;
  f.len = static_cast<uint64_t>(static_cast<int64_t>(exit_code));
  if (lock.owns_lock()) {
    // Our last data may still fill the socket buffers; the peers are reading (they wait on us), so
    // the frame gets through soon. At most 1 s in all, so that abort() stays prompt.
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    for (Mesh* m : w.meshes) {
      const bool idle = !m->busy.load() || m == mesh_.get();
      for (auto& c : m->conns) {
        if (c.fd < 0) continue;
        if (idle && (c.sq.empty() || c.s_off == 0)) io_full(c.fd, &f, kHdr, deadline, true);
        ::shutdown(c.fd, SHUT_RDWR);
      }
    }
  }
  std::_Exit(exit_code);
}

// ---------------------------------------------------------------------------------------------
// SelfCommunicator

void SelfCommunicator::send(const void*, size_t, int peer) {
  Y9_THROW(engine::Error, "rank 0/1: send to rank ", peer, ": a single process has no peers");
}
void SelfCommunicator::recv(void*, size_t, int peer) {
  Y9_THROW(engine::Error, "rank 0/1: recv from rank ", peer, ": a single process has no peers");
}
Pending SelfCommunicator::start_sendrecv(const void*, size_t sbytes, int dst, void*, size_t rbytes, int src) {
  Y9_CHECK(sbytes == 0 && rbytes == 0, "rank 0/1: sendrecv with ranks ", dst, "/", src,
           ": a single process has no peers");
  return Pending{0};
}
void SelfCommunicator::all_gather(const void* sbuf, size_t bytes, void* rbuf) {
  if (bytes > 0 && sbuf != rbuf) std::memmove(rbuf, sbuf, bytes);
}
void SelfCommunicator::abort(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

}  // namespace training::dist
