"""The CUDA side: whether a usable GPU exists, the run path (cupy arrays, the current stream, the launch-error
probe), device timing with CUDA events. cupy is imported only when a gpu op runs."""
