"""An op's recipe, before anything is built or run: the spec (kernel, output rules, flags, attributes), the shape
and dtype rules, MindSpore-style registrations, and how a recipe's callables are pickled to another process.
Below it: build, native."""

from .spec import OpSpec

__all__ = ["OpSpec"]
