#include "parallel/command_codec.h"

#include "base/error.h"

namespace lw::parallel {

CommandWriter& CommandWriter::put_ids(std::span<const int32_t> ids) {
  put(static_cast<uint64_t>(ids.size()));
  bytes_.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t));
  return *this;
}

CommandReader::CommandReader(std::string_view bytes) : bytes_(bytes) {
  LW_CHECK(!bytes.empty(), "a node got an empty command");
}

std::vector<int32_t> CommandReader::get_ids() {
  const auto n = get<uint64_t>();
  // Checked before the vector is sized: a corrupt length must not allocate without bound.
  LW_CHECK(n <= (bytes_.size() - pos_) / sizeof(int32_t),
           "a node got a truncated command '" << bytes_[0] << "': " << n << " ids announced, "
                                              << (bytes_.size() - pos_) << " bytes left");
  std::vector<int32_t> ids(static_cast<size_t>(n));
  take(ids.data(), ids.size() * sizeof(int32_t));
  return ids;
}

void CommandReader::take(void* out, size_t n) {
  LW_CHECK(n <= bytes_.size() - pos_, "a node got a truncated command '" << bytes_[0] << "'");
  if (n) std::memcpy(out, bytes_.data() + pos_, n);
  pos_ += n;
}

}  // namespace lw::parallel
