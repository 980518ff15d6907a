// Refused by aotbench's CUDA emulator: the feature this header brings is not emulated.
#error "Thrust (<thrust/device_vector.h>) is not emulated by aotbench: run this kernel on a GPU (emulate=False)"
