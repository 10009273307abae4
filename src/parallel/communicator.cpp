#include "parallel/communicator.h"

#include <cstdlib>
#include <string>

namespace lw::parallel {

void Communicator::check_all_reduce(const Tensor& x) const {
  LW_CHECK(x.defined() && x.device() == Device::gpu && x.is_contiguous() && is_float(x.dtype()),
           "all_reduce_sum on rank " << rank_ << ": " << x.describe() << " must be a contiguous float tensor on the device");
}

void Communicator::check_all_gather(const Tensor& in, const Tensor& out) const {
  LW_CHECK(in.defined() && out.defined() && in.device() == Device::gpu && out.device() == Device::gpu &&
               in.is_contiguous() && out.is_contiguous() && in.dtype() == out.dtype() &&
               out.numel() == in.numel() * size_,
           "all_gather on rank " << rank_ << ": out " << out.describe() << " must hold " << size_ << " times in "
                                 << in.describe() << ", both contiguous on the device");
}

double group_timeout_seconds() {
  const char* v = std::getenv("LW_DIST_TIMEOUT");
  if (!v || !*v) return 600.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  LW_CHECK(end && *end == '\0' && s > 0, "LW_DIST_TIMEOUT='" << v << "' must be a positive number of seconds");
  return s;
}

}  // namespace lw::parallel
