"""Exceptions raised by fused_swiglu beyond the built-in ones."""


class UnsupportedError(NotImplementedError):
    """A valid request the kernel library has no kernel for (``FSW_ERROR_NOT_SUPPORTED``)."""


class BuildError(RuntimeError):
    """Building or loading the kernel library failed; the message says what to fix."""


class WrongOutputError(RuntimeError):
    """``fused-swiglu bench``: a method's result failed the check made before it is timed
    (:mod:`fused_swiglu.bench.check`); the message names the method, the shape and what is wrong."""
