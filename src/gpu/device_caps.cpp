#include "gpu/device_caps.h"

#include <sstream>

#include "gpu/runtime.h"

namespace lw::gpu {

namespace {

// AMD processor names: "gfx" + major (decimal) + minor + stepping (one hex digit each).
struct GfxVersion {
  int major = 0, minor = 0, stepping = 0;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool parse_gfx(const std::string& arch, GfxVersion& v) {
  if (arch.rfind("gfx", 0) != 0 || arch.size() < 6) return false;
  const std::string digits = arch.substr(3);
  const int minor = hex_digit(digits[digits.size() - 2]), stepping = hex_digit(digits.back());
  if (minor < 0 || stepping < 0) return false;
  int major = 0;
  for (size_t i = 0; i + 2 < digits.size(); ++i) {
    if (digits[i] < '0' || digits[i] > '9') return false;
    major = major * 10 + (digits[i] - '0');
  }
  v = {major, minor, stepping};
  return true;
}

// CUDA: "sm_90" -> 90.
int sm_number(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) return 0;
  int n = 0;
  for (size_t i = 3; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) n = n * 10 + (arch[i] - '0');
  return n;
}

std::string format_bytes(size_t bytes) {
  std::ostringstream os;
  os.precision(3);
  if (bytes >= (size_t{1} << 30)) os << static_cast<double>(bytes) / (size_t{1} << 30) << " GiB";
  else if (bytes >= (size_t{1} << 20)) os << static_cast<double>(bytes) / (size_t{1} << 20) << " MiB";
  else os << static_cast<double>(bytes) / 1024 << " KiB";
  return os.str();
}

// An attribute the runtime may not report (the memory clock): 0 then, and the error cleared.
template <class Attr>
int optional_attribute(Attr attr, int device) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return value;
}

}  // namespace

const char* vendor_name(Vendor vendor) {
  switch (vendor) {
    case Vendor::cuda: return "cuda";
    case Vendor::hip: return "hip";
    case Vendor::emulator: return "emulator";
  }
  return "?";
}

std::string MatrixCores::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(mma_sync, "mma.sync");
  add(wgmma, "wgmma");
  add(mfma, "mfma");
  add(wmma, "wmma");
  return s.empty() ? "none" : s;
}

int arch_number_of(Vendor vendor, const std::string& arch) {
  if (vendor == Vendor::cuda) return sm_number(arch);
  GfxVersion v;
  if (vendor == Vendor::hip && parse_gfx(arch, v)) return 100 * v.major + 10 * v.minor + v.stepping;
  return 0;
}

MatrixCores matrix_cores_of(Vendor vendor, const std::string& arch) {
  MatrixCores m;
  if (vendor == Vendor::cuda) {
    const int sm = sm_number(arch);
    m.mma_sync = sm >= 80;
    m.wgmma = sm == 90;  // Blackwell (sm_100, sm_120) has no wgmma
  } else if (vendor == Vendor::hip) {
    GfxVersion v;
    if (parse_gfx(arch, v)) {
      // gfx908 (MI100) has MFMA but not the bf16_1k instructions; gfx940/941 are MI300 variants.
      m.mfma = arch == "gfx90a" || arch == "gfx940" || arch == "gfx941" || arch == "gfx942" || arch == "gfx950";
      m.wmma = v.major == 11;
    }
  }
  return m;
}

double DeviceCaps::peak_bandwidth_gb_per_s() const {
  if (memory_bus_width_bits <= 0 || memory_clock_khz <= 0) return 0.0;
  return 2.0 * memory_clock_khz * 1e3 * (memory_bus_width_bits / 8.0) / 1e9;
}

std::string DeviceCaps::describe() const {
  std::ostringstream os;
  os << arch << " (" << vendor_name(vendor) << ") " << name << ", warp " << warp_size << ", " << multiprocessors
     << " multiprocessors, shared memory " << format_bytes(shared_memory_per_block) << " per block ("
     << format_bytes(shared_memory_per_block_optin) << " opt-in), memory " << format_bytes(global_memory);
  if (const double bw = peak_bandwidth_gb_per_s(); bw > 0) {
    os.precision(4);
    os << " at " << bw << " GB/s (" << memory_bus_width_bits << "-bit)";
  }
  os << ", matrix cores: " << matrix.describe();
  return os.str();
}

DeviceCaps query_device_caps(int device) {
  cudaDeviceProp p{};
  LW_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceCaps c;
  c.device = device;
  c.name = p.name;
  c.warp_size = warp_size(device);
  c.multiprocessors = p.multiProcessorCount;
  c.shared_memory_per_block = p.sharedMemPerBlock;
  c.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  c.global_memory = p.totalGlobalMem;
  c.l2_cache = p.l2CacheSize > 0 ? static_cast<size_t>(p.l2CacheSize) : 0;
#if defined(LW_TARGET_HOST)
  // The emulator: memory is the host's, no bus or clock to report, no matrix cores.
  c.vendor = Vendor::emulator;
  c.arch = "simt";
#elif defined(LW_TARGET_HIP)
  c.vendor = Vendor::hip;
  const std::string gcn = p.gcnArchName;  // "gfx90a:sramecc+:xnack-"
  c.arch = gcn.substr(0, gcn.find(':'));
  c.memory_bus_width_bits = optional_attribute(hipDeviceAttributeMemoryBusWidth, device);
  c.memory_clock_khz = optional_attribute(hipDeviceAttributeMemoryClockRate, device);
#else
  c.vendor = Vendor::cuda;
  c.arch = "sm_" + std::to_string(10 * p.major + p.minor);
  // Attributes rather than cudaDeviceProp fields: CUDA 13 removed memoryClockRate from the struct.
  c.memory_bus_width_bits = optional_attribute(cudaDevAttrGlobalMemoryBusWidth, device);
  c.memory_clock_khz = optional_attribute(cudaDevAttrMemoryClockRate, device);
#endif
  c.arch_number = arch_number_of(c.vendor, c.arch);
  c.matrix = matrix_cores_of(c.vendor, c.arch);
  return c;
}

}  // namespace lw::gpu
