"""The notebook face: the ``%%aot_kernel`` magic, the explore panel and its logic, debouncing, HTML views and
IPython tracebacks. Above everything but the command line; only here is IPython imported."""

from . import tracebacks

tracebacks.install()  # every aotbench error renders itself in IPython once this layer is loaded
