"""The C ABI version the Python side speaks: must equal ``FSW_ABI_VERSION`` of the kernel library
(``csrc/include/fused_swiglu.h``); the loader refuses a library of another version and the build cache
keys its libraries by it."""

ABI_VERSION = 13
