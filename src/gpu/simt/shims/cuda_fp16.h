// Forwarding header: CUDA code built against the lightwave SIMT emulator.
#pragma once
#include <lw_simt/simt.h>
