// The connections of `lightwave serve`: cpp-httplib's request handling (parsing, routing,
// responses) over a socket stream of our own. cpp-httplib's own loop reads each request through
// a fresh buffered stream and drops whatever the buffer held past the request's end, so a
// pipelined request after the first was lost; here one stream lives as long as the connection,
// so pipelined requests are answered in order. The stream also caps the bytes of a request's
// line and headers (past the cap the request gets 431 and the connection closes), gives them and
// the body overall deadlines (past them 408: a client trickling bytes no longer holds its worker
// for as long as it keeps sending), and closes the connection after a response whose handler did
// not read the request's body.
#pragma once
#include <httplib.h>

#include <cstddef>
#include <ctime>
#include <functional>
#include <string>

namespace lw::server {

enum class HeaderFault {
  none,
  too_large,      // the request line and headers together passed ConnectionLimits::max_header_bytes
  line_too_long,  // one header line passed cpp-httplib's 8,192 bytes
  too_slow,       // the request line and headers took longer than ConnectionLimits::header_seconds
};

// What the request being answered on this thread did to its connection: set by the stream and
// by handlers, read by the error handler and the logger (cpp-httplib runs them all on the
// connection's worker thread) and by the connection loop after the response.
struct ConnectionState {
  HeaderFault header_fault = HeaderFault::none;
  bool close = false;     // close after this response (the request's body was not read)
  size_t body_bytes = 0;  // the body as the handler read it
  bool body_too_slow = false;  // the body took longer than ConnectionLimits::body_seconds
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
};

class Listener : public httplib::Server {
 public:
  explicit Listener(ConnectionLimits limits) : limits_(limits) {}
  // Called for a request refused before cpp-httplib could parse its request line (a line past
  // the header cap): the peer's address and the status sent.
  std::function<void(const std::string& remote, int status)> on_refused;

 private:
  bool process_and_close_socket(socket_t sock) override;
  ConnectionLimits limits_;
};

}  // namespace lw::server
