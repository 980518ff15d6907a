"""The calling convention on aotbench's side: attribute and dtype typing, the native host that implements
``AotExtra`` (``native/src/runtime.cc``, bound with ctypes), loading a kernel library (ELF checks, floating-point mode), and
the header kernels include (``include/``). Imports only :mod:`aotbench.errors` (one layer with it)."""
