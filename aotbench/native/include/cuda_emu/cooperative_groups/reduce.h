// cg::reduce and its operators are in <cooperative_groups.h> for aotbench's CUDA emulator.
#pragma once
#include "../cooperative_groups.h"
