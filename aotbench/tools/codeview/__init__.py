"""What the compiler made of a kernel: its assembly (``op.disassemble()``) and its source annotated with the
optimiser's remarks (``op.annotate()``), both read from a separate inspection build of the op's own command."""
