// MappedFile: a whole file mapped read-only, unmapped when the owner goes away. Checkpoint
// readers hand out pointers into the mapping instead of copying tensors into host memory.
#pragma once
#include <cstddef>
#include <string>

namespace lw::weights {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws lw::Error naming the path and the system's reason (missing, not a regular file,
  // empty, unreadable).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace lw::weights
