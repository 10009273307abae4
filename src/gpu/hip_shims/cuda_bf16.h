// Forwarding header of the HIP build: CUDA include lines resolve to HIP through gpu/compat.h.
#pragma once
#include "gpu/compat.h"
