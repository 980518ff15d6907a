"""Finding what a kernel does wrong: check mode, isolation in a worker process (with the native crash report),
ASan/UBSan builds, and NVIDIA's compute-sanitizer. Below it: measure, op and everything under them."""
