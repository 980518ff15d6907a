"""Measuring ops: accuracy against a reference, side-by-side comparison, size sweeps with a roofline, and tables.
Below it: op, device (clocks and bandwidths)."""
