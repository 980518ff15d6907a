"""The op: a callable kernel with its plan cache, the fast path, and the accessors (check, bench, explore ...)
that reach the layers above lazily. Below it: run, spec, build, native."""
