#include "server/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

namespace lw::server {

ConnectionState& this_connection() {
  thread_local ConnectionState state;
  return state;
}

namespace {

using Clock = std::chrono::steady_clock;

// cpp-httplib refuses a header line longer than this (CPPHTTPLIB_HEADER_MAX_LENGTH) with 400.
constexpr size_t kHttplibHeaderLine = 8192;

// Threads beyond the connection cap, for answering refused connections (each holds one for
// the linger time at most).
constexpr size_t kRefusalThreads = 64;

constexpr int kStopped = -2;

// Waits for `events` on the socket for up to ms milliseconds, or until stop_fd (when >= 0) is
// readable: > 0 ready, 0 timed out, kStopped stopped, -1 error.
int wait_for(int sock, short events, int ms, int stop_fd = -1) {
  pollfd p[2] = {{sock, events, 0}, {stop_fd, POLLIN, 0}};
  for (;;) {
    const int r = ::poll(p, stop_fd >= 0 ? 2 : 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0 && stop_fd >= 0 && (p[1].revents & POLLIN)) return kStopped;
    if (r > 0 && (p[0].revents & (POLLERR | POLLNVAL))) return -1;
    return r;  // POLLHUP comes with POLLIN: the read then sees the end of the stream
  }
}

int milliseconds(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

void address_of(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if ((peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&a), &n) : ::getsockname(sock, reinterpret_cast<sockaddr*>(&a), &n)) != 0)
    return;
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v->sin_addr, text, sizeof text);
    port = ntohs(v->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v->sin6_addr, text, sizeof text);
    port = ntohs(v->sin6_port);
  }
  ip = text;
}

// A connection's socket with one read buffer for its whole life, and the accounting of each
// request's line and header bytes.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int sock, int read_ms, int write_ms, const ConnectionLimits& limits, int stop_fd)
      : sock_(sock), read_ms_(read_ms), write_ms_(write_ms), stop_fd_(stop_fd), limits_(limits) {}

  bool is_readable() const override {
    if (off_ < len_) return true;
    const int wait_ms = read_wait_ms();
    if (wait_for(sock_, POLLIN, wait_ms) > 0) return true;
    if (wait_ms < read_ms_ || Clock::now() >= deadline_) late();
    return false;
  }
  bool is_writable() const override { return wait_for(sock_, POLLOUT, write_ms_) > 0 && alive(); }

  ssize_t read(char* ptr, size_t size) override {
    if (failed_) return -1;
    if (Clock::now() >= deadline_) {  // a client that trickles bytes never makes a read wait
      late();
      return -1;
    }
    if (off_ == len_) {
      const int wait_ms = read_wait_ms();
      const int r = wait_for(sock_, POLLIN, wait_ms, stop_fd_);
      // A request still arriving when the connections are stopped (its line and headers, or
      // its body past the shutdown's grace period) is answered 503 at once.
      if (r == kStopped) {
        ConnectionState& state = this_connection();
        if (in_headers_) state.header_fault = HeaderFault::stopping;
        else state.body_stopped = true;
        failed_ = true;
        return -1;
      }
      if (r <= 0) {
        // A wait cut short by the deadline is the deadline, even when poll's millisecond clock
        // wakes it a little before the steady clock gets there.
        if (wait_ms < read_ms_ || Clock::now() >= deadline_) late();
        return -1;
      }
      ssize_t n;
      do n = ::recv(sock_, buf_.data(), buf_.size(), 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, len_ - off_);
    if (in_headers_) {
      n = account(n);
      if (failed_) return -1;
    }
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n > 0) wrote_ = true;
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

  // Waits up to timeout_ms for the next request's first byte, until the server stops; true
  // at once when a pipelined request is already buffered.
  bool wait_for_request(int timeout_ms) const {
    if (off_ < len_) return true;
    return wait_for(sock_, POLLIN, timeout_ms, stop_fd_) > 0;
  }

  // Starts a request (its first byte is here): its line and headers are counted, and their
  // deadline runs, from now.
  void begin_request() {
    in_headers_ = true;
    first_line_ = true;
    header_bytes_ = line_bytes_ = 0;
    wrote_ = false;
    failed_ = false;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits_.header_seconds));
  }
  bool wrote() const { return wrote_; }

 private:
  // A read waits for the read timeout, or until the request's deadline if that comes first.
  int read_wait_ms() const {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, read_ms_));
  }

  // Past the deadline: the stream fails, and the request is marked too slow.
  void late() const {
    ConnectionState& state = this_connection();
    if (in_headers_) state.header_fault = HeaderFault::too_slow;
    else state.body_too_slow = true;
    failed_ = true;
  }

  // Counts the next n buffered bytes as request line and headers; returns how many of them
  // belong there (the headers end at an empty CRLF line, as cpp-httplib reads them). Past the
  // cap or the deadline the stream fails; at their end the body's deadline starts.
  size_t account(size_t n) {
    ConnectionState& state = this_connection();
    for (size_t i = 0; i < n; ++i) {
      const char c = buf_[off_ + i];
      if (++header_bytes_ > limits_.max_header_bytes) {
        state.header_fault = HeaderFault::too_large;
        failed_ = true;
        return 0;
      }
      if (++line_bytes_ == 1) line_starts_cr_ = c == '\r';
      if (c != '\n') continue;
      if (!first_line_ && line_bytes_ == 2 && line_starts_cr_) {
        in_headers_ = false;
        deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits_.body_seconds));
        return i + 1;
      }
      if (!first_line_ && line_bytes_ > kHttplibHeaderLine && state.header_fault == HeaderFault::none)
        state.header_fault = HeaderFault::line_too_long;
      first_line_ = false;
      line_bytes_ = 0;
    }
    return n;
  }

  // The peer has not closed its end (cpp-httplib's test: nothing to read, or a byte to peek).
  bool alive() const {
    const int r = wait_for(sock_, POLLIN, 0);
    if (r == 0) return true;
    if (r < 0) return false;
    char c;
    ssize_t n;
    do n = ::recv(sock_, &c, 1, MSG_PEEK);
    while (n < 0 && errno == EINTR);
    return n > 0;
  }

  int sock_, read_ms_, write_ms_, stop_fd_;
  ConnectionLimits limits_;
  Clock::time_point deadline_ = Clock::time_point::max();  // of the headers, then of the body
  std::array<char, 4096> buf_{};
  size_t off_ = 0, len_ = 0;
  mutable bool failed_ = false;  // set by late() from the const is_readable too
  bool wrote_ = false;
  bool in_headers_ = false, first_line_ = true, line_starts_cr_ = false;
  size_t header_bytes_ = 0, line_bytes_ = 0;
};

// Drops what the peer still sends, for a bounded time and size, after our last write: a close
// with unread bytes resets the connection, and the reset can destroy the answer in flight.
void linger_close(int sock, const ConnectionLimits& limits) {
  ::shutdown(sock, SHUT_WR);
  const auto end = Clock::now() + std::chrono::duration<double>(limits.linger_seconds);
  std::array<char, 4096> scratch;
  size_t dropped = 0;
  while (dropped < limits.linger_bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0 || wait_for(sock, POLLIN, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(sock, scratch.data(), scratch.size(), 0);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
}

// Writes a whole response that cpp-httplib did not make (the connection or its request was
// refused before a request could be parsed): an OpenAI-shaped error, after which the
// connection closes.
void write_refusal(httplib::Stream& strm, const char* status_line, const char* type, const std::string& message,
                   bool retry_after) {
  const std::string body = R"({"error":{"message":")" + message + R"(","type":")" + type +
                           R"(","param":null,"code":null}})";
  const std::string reply = std::string("HTTP/1.1 ") + status_line +
                            "\r\nContent-Type: application/json\r\nConnection: close\r\n" +
                            (retry_after ? "Retry-After: 1\r\n" : "") +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (size_t off = 0; off < reply.size();) {
    const ssize_t n = strm.write(reply.data() + off, reply.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

ConnectionGate::Verdict ConnectionGate::admit(const std::string& client) {
  std::lock_guard lock(mu_);
  if (static_cast<size_t>(open_.load()) >= max_total_) {
    ++refused_server_;
    return Verdict::server_full;
  }
  size_t& mine = per_client_[client];
  if (mine >= max_per_client_) {
    ++refused_client_;
    return Verdict::client_full;
  }
  ++mine;
  ++open_;
  return Verdict::admitted;
}

void ConnectionGate::release(const std::string& client) {
  std::lock_guard lock(mu_);
  const auto it = per_client_.find(client);
  if (it == per_client_.end()) return;
  if (--it->second == 0) per_client_.erase(it);
  --open_;
}

void ConnectionThreads::enqueue(std::function<void()> fn) {
  std::vector<std::thread> ended;
  {
    std::lock_guard lock(mu_);
    for (const uint64_t id : ended_) {
      const auto it = threads_.find(id);
      ended.push_back(std::move(it->second));
      threads_.erase(it);
    }
    ended_.clear();
    if (threads_.size() < max_threads_) {
      try {
        const uint64_t id = next_id_++;
        threads_.emplace(id, std::thread(&ConnectionThreads::work, this, id, fn));
        fn = nullptr;
      } catch (const std::system_error&) {
        // No thread to be had (a process or system limit): the connection waits for one of the
        // running ones, or, with none running, is served on the listener's thread.
      }
    }
    if (fn && !threads_.empty()) {
      queued_.push_back(std::move(fn));
      fn = nullptr;
    }
  }
  for (std::thread& t : ended) t.join();
  if (fn) fn();
}

void ConnectionThreads::work(uint64_t id, std::function<void()> fn) {
  for (;;) {
    fn();
    std::lock_guard lock(mu_);
    if (queued_.empty()) {
      ended_.push_back(id);
      return;
    }
    fn = std::move(queued_.front());
    queued_.pop_front();
  }
}

void ConnectionThreads::shutdown() {
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
    ended_.clear();
  }
  // A thread ends only once the queue is empty, so joining them all serves the queued ones too.
  for (auto& [id, t] : threads) t.join();
}

Listener::Listener(ConnectionLimits limits)
    : limits_(limits), gate_(limits.max_connections, limits.max_connections_per_client) {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw std::system_error(errno, std::generic_category(), "serve: cannot make the eventfd that stops connections");
  const size_t threads = limits.max_connections + kRefusalThreads;
  new_task_queue = [threads] { return new ConnectionThreads(threads); };
}

Listener::~Listener() {
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

bool Listener::set_backlog(int backlog) {
  const socket_t s = svr_sock_;
  return s != INVALID_SOCKET && ::listen(s, backlog) == 0;  // Linux takes a new backlog on a listening socket
}

void Listener::stop_connections() {
  const uint64_t one = 1;
  if (stop_fd_ >= 0) (void)!::write(stop_fd_, &one, sizeof one);
}

bool Listener::process_and_close_socket(socket_t sock) {
  ConnectionStream strm(sock, milliseconds(read_timeout_sec_, read_timeout_usec_),
                        milliseconds(write_timeout_sec_, write_timeout_usec_), limits_, stop_fd_);
  // Admission, before a byte is read: a refused connection is answered at once and closed.
  std::string client;
  int client_port = 0;
  address_of(sock, true, client, client_port);
  const ConnectionGate::Verdict verdict = gate_.admit(client);
  if (verdict != ConnectionGate::Verdict::admitted) {
    const bool server = verdict == ConnectionGate::Verdict::server_full;
    if (server)
      write_refusal(strm, "503 Service Unavailable", "server_error",
                    "the server has its limit of " + std::to_string(limits_.max_connections) +
                        " open connections (--max-connections); retry later", true);
    else
      write_refusal(strm, "429 Too Many Requests", "rate_limit_error",
                    "this client address has its limit of " + std::to_string(limits_.max_connections_per_client) +
                        " open connections (--max-connections-per-client); close one or retry later", true);
    if (on_connection_refused)
      on_connection_refused(client, server ? 503 : 429, server ? "--max-connections" : "--max-connections-per-client");
    linger_close(sock, limits_);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return false;
  }
  struct Release {
    ConnectionGate& gate;
    const std::string& client;
    ~Release() { gate.release(client); }
  } release{gate_, client};

  bool ret = false, linger = false;
  for (size_t left = keep_alive_max_count_; left > 0; --left) {
    if (svr_sock_ == INVALID_SOCKET || !strm.wait_for_request(static_cast<int>(keep_alive_timeout_sec_ * 1000))) break;
    ConnectionState& state = this_connection();
    state = ConnectionState{};
    int port = 0;
    strm.get_remote_ip_and_port(state.remote, port);
    strm.begin_request();
    bool closed = false;
    ret = process_request(strm, left == 1, closed, nullptr);
    if (state.header_fault != HeaderFault::none && state.header_fault != HeaderFault::line_too_long && !strm.wrote()) {
      // The request line alone passed the cap or the deadline, or the server stopped during it:
      // cpp-httplib gave up before it could answer. Reported (counted) before the answer is
      // written, as answered requests are.
      const int status = state.header_fault == HeaderFault::too_slow   ? 408
                         : state.header_fault == HeaderFault::stopping ? 503
                                                                       : 431;
      if (on_refused) on_refused(state.remote, status);
      if (status == 408) {
        write_refusal(strm, "408 Request Timeout", "invalid_request_error",
                      "the request line and headers took longer than the server waits", false);
      } else if (status == 503) {
        write_refusal(strm, "503 Service Unavailable", "server_error", "the server is shutting down", false);
      } else {
        write_refusal(strm, "431 Request Header Fields Too Large", "invalid_request_error",
                      "the request line and headers are larger than the server accepts", false);
      }
    }
    if (state.header_fault != HeaderFault::none || state.close) {
      linger = true;
      break;
    }
    if (!ret || closed) break;
  }
  this_connection() = ConnectionState{};
  if (linger) linger_close(sock, limits_);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace lw::server
