// Everything a CUDA kernel source needs to build and run against the SIMT emulator.
#pragma once
#include "lw_simt/types.h"
#include "lw_simt/half.h"
#include "lw_simt/runtime.h"
#include "lw_simt/emulator.h"
#include "lw_simt/shared.h"
#include "lw_simt/device.h"
#include "lw_simt/launch.h"
#include "lw_simt/portable.h"
