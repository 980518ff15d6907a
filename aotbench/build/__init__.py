"""Turning a source into a library: the compilers and their documented commands (g++, nvcc), the cache, the
compile step with its dependency tracking, the cells' source files, and building the native host. Below it: native."""
