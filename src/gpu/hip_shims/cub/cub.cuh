// Forwarding header of the HIP build: CUB spellings on hipCUB.
#pragma once
#include "gpu/compat.h"
#include <hipcub/hipcub.hpp>
namespace cub = hipcub;
