"""Version numbers that go into every cache key."""

__version__ = "0.1.0"

#: Must equal AOTBENCH_AOT_EXTRA_VERSION in include/custom_aot_extra.h (a test checks it).
HEADER_VERSION = 2
