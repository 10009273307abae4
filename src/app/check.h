// `lightwave check`: every op family on fresh random inputs against a float64 host reference,
// on one device, as a table (family, case, worst error, its bound, PASS/FAIL).
#pragma once
#include <cstdint>

namespace lw::app {

// Runs the checks on `device` with inputs drawn from `seed`; returns the process exit status:
// 0 when every case is within its bound, 1 otherwise.
int run_check(int device, uint64_t seed);

}  // namespace lw::app
