"""Running a kernel: the plan of one input signature (Init, workspaces, marshalled shapes), the guarded first
call, the devices (cpu, gpu) and the runners that call the kernel in this process, on a CUDA device or in an
isolated worker process. Below it: spec, build, native."""
