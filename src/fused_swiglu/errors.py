"""Exceptions raised by fused_swiglu beyond the built-in ones."""


class UnsupportedError(NotImplementedError):
    """A valid request the kernel library has no kernel for (``FSW_ERROR_NOT_SUPPORTED``)."""


class BuildError(RuntimeError):
    """Building or loading the kernel library failed; the message says what to fix."""
