#include "parallel/rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "parallel/communicator.h"
#include "core/logging.h"
#include "base/error.h"

namespace lw::parallel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kHello[] = "lightwave-rendezvous-1";

std::string errno_text() { return std::strerror(errno); }

// Waits until fd is readable; false on timeout (timeout < 0: no limit).
bool wait_readable(int fd, double timeout) {
  pollfd p{fd, POLLIN, 0};
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  for (;;) {
    int ms = -1;
    if (timeout >= 0) {
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      ms = static_cast<int>(left * 1000) + 1;
    }
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) LW_FAIL("rendezvous: poll failed: " << errno_text());
  }
}

void send_all(int fd, const void* data, size_t n, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    LW_CHECK(w > 0, "rendezvous: sending to " << peer << " failed: " << errno_text() << " (has it stopped?)");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void recv_all(int fd, void* data, size_t n, const std::string& peer, double timeout) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    LW_CHECK(wait_readable(fd, timeout), "rendezvous: " << peer << " sent nothing in " << timeout << " s");
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    LW_CHECK(r != 0, "rendezvous: " << peer << " closed the connection (it stopped or failed)");
    LW_CHECK(r > 0, "rendezvous: receiving from " << peer << " failed: " << errno_text());
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void send_message(int fd, const std::string& m, const std::string& peer) {
  const uint64_t n = m.size();
  send_all(fd, &n, sizeof(n), peer);
  send_all(fd, m.data(), m.size(), peer);
}

std::string recv_message(int fd, const std::string& peer, double timeout) {
  uint64_t n = 0;
  recv_all(fd, &n, sizeof(n), peer, timeout);
  LW_CHECK(n <= (uint64_t{1} << 32), "rendezvous: " << peer << " announced a message of " << n << " bytes");
  std::string m(n, '\0');
  recv_all(fd, m.data(), n, peer, timeout);
  return m;
}

addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int e = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  LW_CHECK(e == 0, "rendezvous: cannot resolve '" << host << "': " << gai_strerror(e));
  return res;
}

// Small messages go out at once; keepalive notices a peer host that vanished without closing.
void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

}  // namespace

std::pair<std::string, int> parse_address(const std::string& address) {
  const size_t colon = address.rfind(':');
  LW_CHECK(colon != std::string::npos && colon > 0, "--dist-init-addr '" << address << "' must be host:port");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = address.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  LW_CHECK(!port.empty() && end && *end == '\0' && p >= 0 && p <= 65535,
           "--dist-init-addr '" << address << "': the port '" << port << "' must be a number in 0..65535");
  return {host, static_cast<int>(p)};
}

Rendezvous::Rendezvous(const std::string& address, int nnodes, int node_rank) : nnodes_(nnodes), node_rank_(node_rank) {
  LW_CHECK(nnodes >= 1 && node_rank >= 0 && node_rank < nnodes,
           "rendezvous: node rank " << node_rank << " of " << nnodes << " nodes");
  const auto [host, port] = parse_address(address);
  const double timeout = group_timeout_seconds();
  if (nnodes == 1) return;
  if (node_rank == 0) {
    // Every interface: the name node 0 is reached by may resolve to a loopback address here
    // (Debian maps the host's own name to 127.0.1.1).
    addrinfo* res = resolve("", port, true);
    std::string why = "no address";
    for (addrinfo* a = res; a && listener_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, nnodes) == 0) {
        listener_ = fd;
      } else {
        why = errno_text();
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    LW_CHECK(listener_ >= 0, "rendezvous: node 0 cannot listen on " << address << ": " << why);
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    peers_.assign(static_cast<size_t>(nnodes - 1), -1);
    for (int joined = 0; joined < nnodes - 1;) {
      LW_CHECK(wait_readable(listener_, timeout), "rendezvous: node 0 waited " << timeout << " s on port " << port_ << " for "
                                                                                << nnodes - 1 - joined << " more node(s)");
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) continue;
      no_delay(fd);
      // The hello: "lightwave-rendezvous-1 <nnodes> <node_rank>".
      std::string hello, reply = "ok";
      try {
        hello = recv_message(fd, "a connecting node", std::min(timeout, 10.0));
      } catch (const Error&) {
        ::close(fd);
        continue;
      }
      int their_nnodes = -1, their_rank = -1;
      if (std::sscanf(hello.c_str(), "lightwave-rendezvous-1 %d %d", &their_nnodes, &their_rank) != 2)
        reply = "not a lightwave node";
      else if (their_nnodes != nnodes)
        reply = "node 0 expects " + std::to_string(nnodes) + " nodes, this one " + std::to_string(their_nnodes);
      else if (their_rank < 1 || their_rank >= nnodes)
        reply = "node rank " + std::to_string(their_rank) + " is outside 1.." + std::to_string(nnodes - 1);
      else if (peers_[static_cast<size_t>(their_rank - 1)] >= 0)
        reply = "node rank " + std::to_string(their_rank) + " has joined already";
      try {
        send_message(fd, reply, "node " + std::to_string(their_rank));
      } catch (const Error&) {
      }
      if (reply != "ok") {
        // A stray or misconfigured connection: refused (it was told why), and node 0 waits on
        // for the right nodes.
        ::close(fd);
        log().warn("rendezvous: refused a connection: {}", reply);
        continue;
      }
      peers_[static_cast<size_t>(their_rank - 1)] = fd;
      ++joined;
    }
    return;
  }
  // Another node: connect, retrying while node 0 comes up.
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  int fd = -1;
  std::string why;
  while (fd < 0) {
    addrinfo* res = resolve(host, port, false);
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
      const int s = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (s < 0) continue;
      if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
        fd = s;
      } else {
        why = errno_text();
        ::close(s);
      }
    }
    ::freeaddrinfo(res);
    if (fd >= 0) break;
    LW_CHECK(Clock::now() < deadline, "rendezvous: node " << node_rank << " could not reach node 0 at " << address << " in "
                                                          << timeout << " s: " << why);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  no_delay(fd);
  peers_.push_back(fd);
  port_ = port;
  send_message(fd, std::string(kHello) + " " + std::to_string(nnodes) + " " + std::to_string(node_rank), "node 0");
  const std::string reply = recv_message(fd, "node 0", timeout);
  LW_CHECK(reply == "ok", "rendezvous: node 0 refused node " << node_rank << ": " << reply);
}

Rendezvous::~Rendezvous() {
  for (int fd : peers_)
    if (fd >= 0) ::close(fd);
  if (listener_ >= 0) ::close(listener_);
}

void Rendezvous::broadcast(std::string& message) {
  if (nnodes_ == 1) return;
  if (node_rank_ == 0) {
    for (size_t i = 0; i < peers_.size(); ++i) send_message(peers_[i], message, "node " + std::to_string(i + 1));
  } else {
    message = recv_message(peers_[0], "node 0", -1.0);
  }
}

std::vector<std::string> Rendezvous::gather(const std::string& message) {
  if (node_rank_ != 0) {
    send_message(peers_[0], message, "node 0");
    return {};
  }
  std::vector<std::string> all{message};
  for (size_t i = 0; i < peers_.size(); ++i)
    all.push_back(recv_message(peers_[i], "node " + std::to_string(i + 1), group_timeout_seconds()));
  return all;
}

}  // namespace lw::parallel
