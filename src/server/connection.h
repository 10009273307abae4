// The connections of `lightwave serve`: cpp-httplib's request handling (parsing, routing,
// responses) over a socket stream of our own. cpp-httplib's own loop reads each request through
// a fresh buffered stream and drops whatever the buffer held past the request's end, so a
// pipelined request after the first was lost; here one stream lives as long as the connection,
// so pipelined requests are answered in order. The stream also caps the bytes of a request's
// line and headers (past the cap the request gets 431 and the connection closes), gives them and
// the body overall deadlines (past them 408: a client trickling bytes no longer holds its worker
// for as long as it keeps sending), and closes the connection after a response whose handler did
// not read the request's body. Each connection gets a thread of its own as it is accepted, under
// caps on open connections in total and per client address (past them 503 or 429 before a
// byte is read).
#pragma once
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace lw::server {

enum class HeaderFault {
  none,
  too_large,      // the request line and headers together passed ConnectionLimits::max_header_bytes
  line_too_long,  // one header line passed cpp-httplib's 8,192 bytes
  too_slow,       // the request line and headers took longer than ConnectionLimits::header_seconds
  stopping,       // the server stopped while the request line and headers were arriving
};

// What the request being answered on this thread did to its connection: set by the stream and
// by handlers, read by the error handler and the logger (cpp-httplib runs them all on the
// connection's worker thread) and by the connection loop after the response.
struct ConnectionState {
  HeaderFault header_fault = HeaderFault::none;
  bool close = false;     // close after this response (the request's body was not read)
  size_t body_bytes = 0;  // the body as the handler read it
  bool body_too_slow = false;  // the body took longer than ConnectionLimits::body_seconds
  bool body_stopped = false;   // the server stopped its connections while the body arrived
  std::string remote;     // the peer's address (httplib fills the request's only once it parsed)
};
ConnectionState& this_connection();

struct ConnectionLimits {
  size_t max_header_bytes = size_t{64} << 10;
  // From a request's first byte, its line and headers must arrive within header_seconds; from
  // their end, its body within body_seconds (each read also times out on its own, after the
  // server's read timeout).
  double header_seconds = 10, body_seconds = 60;
  // A refused request's leftover bytes are read and dropped for this long at most before the
  // socket closes (closing with unread bytes would reset the connection and could lose the
  // answer), up to linger_bytes.
  double linger_seconds = 2;
  size_t linger_bytes = size_t{1} << 20;
  // Open connections in total and per peer address; past either a new connection is answered
  // 503 (total) or 429 (its address) and closed.
  size_t max_connections = 1024, max_connections_per_client = 256;
};

// The open connections of a server, in total and per peer address: a new one is admitted only
// under both caps.
class ConnectionGate {
 public:
  enum class Verdict { admitted, server_full, client_full };
  ConnectionGate(size_t max_total, size_t max_per_client) : max_total_(max_total), max_per_client_(max_per_client) {}
  Verdict admit(const std::string& client);
  void release(const std::string& client);  // once per admitted connection
  int64_t open() const { return open_.load(); }
  int64_t refused(Verdict why) const { return why == Verdict::client_full ? refused_client_.load() : refused_server_.load(); }

 private:
  std::mutex mu_;
  size_t max_total_, max_per_client_;
  std::unordered_map<std::string, size_t> per_client_;
  std::atomic<int64_t> open_{0}, refused_server_{0}, refused_client_{0};
};

// cpp-httplib's task queue, for connections: a connection holds its thread for its whole life
// (keep-alive included), so with a fixed pool a new connection, health checks included, waited
// behind open ones. Here each gets a thread at once, up to max_threads; past that (more
// connections than the gate admits plus its reserve for refusals) they wait for one to end.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max_threads) : max_threads_(max_threads) {}
  ~ConnectionThreads() override { shutdown(); }
  void enqueue(std::function<void()> fn) override;
  // Waits for every connection, queued ones included (cpp-httplib calls it once the listener
  // has closed).
  void shutdown() override;

 private:
  void work(uint64_t id, std::function<void()> fn);

  std::mutex mu_;
  size_t max_threads_;
  uint64_t next_id_ = 0;
  std::map<uint64_t, std::thread> threads_;
  std::vector<uint64_t> ended_;  // threads done with their last task, to be joined
  std::deque<std::function<void()>> queued_;
};

class Listener : public httplib::Server {
 public:
  explicit Listener(ConnectionLimits limits);
  ~Listener() override;
  // Called for a request refused before cpp-httplib could parse its request line (past the
  // header cap or deadline, or cut off by stop_connections): the peer's address and the status,
  // before the answer is written.
  std::function<void(const std::string& remote, int status)> on_refused;
  // Called for a connection refused by the gate, before any of it was read: the peer's address,
  // the status sent and the cap ("--max-connections" or "--max-connections-per-client").
  std::function<void(const std::string& remote, int status, const char* cap)> on_connection_refused;
  const ConnectionGate& gate() const { return gate_; }
  // Sets the listening socket's accept queue (cpp-httplib's library listens with a backlog of 5,
  // compiled in); after bind_to_port.
  bool set_backlog(int backlog);
  // Ends the connections that wait for a request or are still receiving one (its reads fail;
  // the request is answered 503); responses being written are not cut. Before stop().
  void stop_connections();

 private:
  bool process_and_close_socket(socket_t sock) override;
  ConnectionLimits limits_;
  ConnectionGate gate_;
  int stop_fd_ = -1;  // an eventfd, readable once stop_connections() was called
};

}  // namespace lw::server
