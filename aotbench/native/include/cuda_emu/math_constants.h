// For aotbench's CUDA emulator: the constants of CUDA's <math_constants.h> that kernels use most.
#pragma once
#include <cmath>
#include <limits>
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931e+0
#define CUDART_PIO2_F 1.570796327f
#define CUDART_SQRT_2PI_F 2.506628275f
#define CUDART_L2E_F 1.442695041f
#define CUDART_LN2_F 0.693147181f
#define CUDART_INF_F (std::numeric_limits<float>::infinity())
#define CUDART_INF (std::numeric_limits<double>::infinity())
#define CUDART_NAN_F (std::numeric_limits<float>::quiet_NaN())
#define CUDART_NAN (std::numeric_limits<double>::quiet_NaN())
#define CUDART_MAX_NORMAL_F 3.402823466e38f
#define CUDART_MIN_DENORM_F 1.40129846e-45f
