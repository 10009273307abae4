// What the device of a context can do, queried once: the target, the architecture, the warp,
// the multiprocessors and their shared memory, the memory, and the matrix-core instruction
// sets a kernel may use. Ops choose between their implementations from this record
// (ops/select.h) instead of from `#if LW_TARGET_*`.
#pragma once
#include <cstddef>
#include <string>

namespace lw::gpu {

// Who runs the kernels: an NVIDIA GPU (CUDA), an AMD GPU (HIP) or the host SIMT emulator.
enum class Vendor { cuda, hip, emulator };
const char* vendor_name(Vendor vendor);  // "cuda", "hip", "emulator"

// Matrix-core instruction sets of the device (none on the emulator). A flag says the device
// executes the instructions; a kernel that uses them must also have been compiled for them
// (wgmma needs an sm_90a build, not sm_90).
struct MatrixCores {
  bool mma_sync = false;  // NVIDIA mma.sync with bf16 and f16 operands: sm_80 and later
  bool wgmma = false;     // NVIDIA warpgroup wgmma.mma_async: sm_90 (Hopper) only
  bool mfma = false;      // AMD MFMA with bf16 operands at full rate (bf16_1k): gfx90a, gfx94x, gfx950
  bool wmma = false;      // AMD WMMA of RDNA 3: gfx11xx (gfx12's WMMA differs in operand layout)
  bool any() const { return mma_sync || wgmma || mfma || wmma; }
  std::string describe() const;  // "mma.sync wgmma", or "none"
};

struct DeviceCaps {
  Vendor vendor = Vendor::emulator;
  int device = 0;
  std::string name;  // the runtime's device name
  // "sm_90" on CUDA, "gfx942" on HIP (hipDeviceProp_t::gcnArchName without its feature
  // suffixes such as ":sramecc+:xnack-"), "simt" on the emulator.
  std::string arch;
  // A number that orders the architectures of one vendor: 10 * major + minor on CUDA
  // (sm_90 -> 90), 100 * major + 10 * minor + stepping on HIP from the gfx name (gfx942 -> 942,
  // gfx90a -> 910, gfx1100 -> 1100); 0 on the emulator.
  int arch_number = 0;
  int warp_size = 0;
  int multiprocessors = 0;                  // SMs on NVIDIA, CUs on AMD, worker threads on the emulator
  size_t shared_memory_per_block = 0;       // bytes without opting in
  size_t shared_memory_per_block_optin = 0;  // bytes a kernel may ask for (cudaFuncSetAttribute)
  size_t global_memory = 0;                 // bytes
  size_t l2_cache = 0;                      // bytes; 0 where not reported
  int memory_bus_width_bits = 0;            // 0 where the runtime does not report it
  int memory_clock_khz = 0;                 // 0 where the runtime does not report it
  MatrixCores matrix;

  bool emulator() const { return vendor == Vendor::emulator; }
  // Peak memory bandwidth from bus width and clock (double data rate), 0 when either is unknown.
  double peak_bandwidth_gb_per_s() const;
  // One line: "sm_90 (cuda) NVIDIA H100, warp 32, 132 multiprocessors, ...".
  std::string describe() const;
};

// The record of `device`, from the runtime's properties and attributes.
DeviceCaps query_device_caps(int device);

// From an architecture's name ("sm_90", "gfx942", "simt"), as query_device_caps derives them
// (testable without the device): DeviceCaps::arch_number and the matrix-core flags.
int arch_number_of(Vendor vendor, const std::string& arch);
MatrixCores matrix_cores_of(Vendor vendor, const std::string& arch);

}  // namespace lw::gpu
