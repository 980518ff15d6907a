// Refused by aotbench's CUDA emulator: the feature this header brings is not emulated.
#error "tensor-core matrix operations (wmma, <mma.h>) is not emulated by aotbench: run this kernel on a GPU (emulate=False)"
