// The bytes of the commands node 0 of a multi-node group sends the other nodes over the
// rendezvous channel: an op letter, then the arguments in native byte order (the nodes run
// the same build). Only bytes in and bytes out: what a command means is its sender's and
// executor's business (engine/model_runner.cpp).
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace lw::parallel {

// The op letters of a tensor-parallel group's commands.
namespace command {
constexpr char kFit = 'F';            // KV blocks that fit: fraction, block size, cache format
constexpr char kAllocate = 'A';       // (re)allocate the KV cache: blocks, block size, cache format
constexpr char kForward = 'W';        // one forward pass over a batch of sequence chunks
constexpr char kDeterministic = 'D';  // batch-invariant execution on or off
constexpr char kQuit = 'Q';           // the group ends
}  // namespace command

// A follower's reply that reports its failure starts with this.
constexpr std::string_view kErrorReply = "error: ";
inline bool is_error_reply(std::string_view reply) { return reply.substr(0, kErrorReply.size()) == kErrorReply; }

class CommandWriter {
 public:
  explicit CommandWriter(char op) : bytes_(1, op) {}
  template <class T>
  CommandWriter& put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "commands carry plain values");
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(T));
    return *this;
  }
  // A length, then the ids.
  CommandWriter& put_ids(std::span<const int32_t> ids);
  const std::string& str() const { return bytes_; }

 private:
  std::string bytes_;
};

// Reads what a CommandWriter wrote, in the same order; running past the end throws lw::Error
// (a truncated command), as does an empty command.
class CommandReader {
 public:
  explicit CommandReader(std::string_view bytes);
  char op() const { return bytes_[0]; }
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>, "commands carry plain values");
    T value;
    take(&value, sizeof(T));
    return value;
  }
  std::vector<int32_t> get_ids();
  bool at_end() const { return pos_ == bytes_.size(); }

 private:
  void take(void* out, size_t n);
  std::string_view bytes_;
  size_t pos_ = 1;
};

}  // namespace lw::parallel
