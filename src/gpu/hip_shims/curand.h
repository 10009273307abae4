// Forwarding header of the HIP build: cuRAND spellings on hipRAND.
#pragma once
#include "gpu/compat.h"
#include <hiprand/hiprand.h>

#define curandGenerator_t hiprandGenerator_t
#define curandStatus_t hiprandStatus_t
#define CURAND_STATUS_SUCCESS HIPRAND_STATUS_SUCCESS
#define CURAND_RNG_PSEUDO_DEFAULT HIPRAND_RNG_PSEUDO_DEFAULT
#define curandCreateGenerator hiprandCreateGenerator
#define curandDestroyGenerator hiprandDestroyGenerator
#define curandSetPseudoRandomGeneratorSeed hiprandSetPseudoRandomGeneratorSeed
#define curandSetStream hiprandSetStream
#define curandGenerateUniform hiprandGenerateUniform
#define curandGenerateNormal hiprandGenerateNormal
