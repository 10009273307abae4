// Forwarding header of the HIP build: NCCL spellings on RCCL (RCCL keeps NCCL's names).
#pragma once
#include "gpu/compat.h"
#include <rccl/rccl.h>
