"""Where a call runs: the device seam (:class:`Device`: the cpu, or a CUDA gpu through cupy), each device's clock
(wall clock, CUDA events), copy bandwidth and run path. Below it: call, build, abi."""
