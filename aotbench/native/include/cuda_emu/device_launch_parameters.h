// For aotbench's CUDA emulator: everything this CUDA header declares is in aotbench_cuda_emu.h.
#pragma once
#include "aotbench_cuda_emu.h"
