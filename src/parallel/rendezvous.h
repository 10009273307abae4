// The control channel of a group spread over several processes (one per host, say): node 0
// listens on host:port and every other node connects to it. It carries the NCCL group id at
// the start and then, each step, what node 0's scheduler asks every rank to run; the tensors
// themselves go through NCCL.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lw::parallel {

class Rendezvous {
 public:
  // Node 0 binds `address` ("host:port"; port 0 picks a free one, see port()) and waits for
  // the nnodes - 1 others; the others connect, retrying while node 0 starts. Both wait at
  // most the group timeout (LW_DIST_TIMEOUT). Mismatched node counts or a node rank taken
  // twice are refused with a message on both sides.
  Rendezvous(const std::string& address, int nnodes, int node_rank);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int nnodes() const { return nnodes_; }
  int node_rank() const { return node_rank_; }
  int port() const { return port_; }

  // Node 0 sends `message` to every other node; another node receives node 0's next message
  // into it, waiting as long as it takes (an idle server sends nothing), and throws when node
  // 0 has gone.
  void broadcast(std::string& message);
  // Node 0 gets every node's message (its own first, then by node rank), waiting at most the
  // group timeout for each; another node sends its message and gets an empty vector.
  std::vector<std::string> gather(const std::string& message);

 private:
  int nnodes_, node_rank_, port_ = 0;
  int listener_ = -1;
  std::vector<int> peers_;  // node 0: the socket of node r at r - 1; others: node 0's at 0
};

// "host:port" split and checked; the message names what is wrong.
std::pair<std::string, int> parse_address(const std::string& address);

}  // namespace lw::parallel
