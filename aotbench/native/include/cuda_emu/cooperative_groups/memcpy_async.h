// Refused by aotbench's CUDA emulator: the feature this header brings is not emulated.
#error "cp.async (<cooperative_groups/memcpy_async.h>) is not emulated by aotbench: run this kernel on a GPU (emulate=False)"
