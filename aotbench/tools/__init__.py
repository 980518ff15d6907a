"""What a user does with an op besides calling it: timing (wall clock, CUDA events, bandwidth), accuracy and
comparisons, sweeps, check mode, the compiler views (``codeview``) and NVIDIA's compute-sanitizer. Below it: op,
run, spec, build, native."""
