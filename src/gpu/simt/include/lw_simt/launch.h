// Launching a __global__ function on the emulator: lw::simt::run(kernel, grid, block, smem, args...).
#pragma once
#include <tuple>
#include <utility>

#include "lw_simt/emulator.h"

namespace lw::simt {

template <class... KArgs, class... Args>
void run(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t dynamic_shared_bytes,
         Args&&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "kernel called with the wrong number of arguments");
  std::tuple<std::decay_t<KArgs>...> bound(static_cast<KArgs>(std::forward<Args>(args))...);
  launch({name, grid, block, dynamic_shared_bytes}, [&] { std::apply(kernel, bound); });
}

}  // namespace lw::simt
