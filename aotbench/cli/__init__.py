"""The command line (``python -m aotbench demo|doctor|cache ...``) and the compute-sanitizer child process."""
