"""Loading the kernel libraries and the PyTorch operator library, and binding them.

The core library (``libfused_swiglu.so``, C ABI ``csrc/include/fused_swiglu.h``) is a plain shared
object with no libtorch linkage. It is loaded on first use and kept for the life of the process:
from ``FUSED_SWIGLU_LIBRARY`` when set, else the wheel's prebuilt copy, else the build cache
(building it if needed, see :mod:`fused_swiglu.build`). Each kernel config is its own shared object
(``libfsw_<name>.so``), loaded into the core library on the first launch that needs it
(:meth:`Library.ensure`): from the prebuilt folder if it holds it, else from the cache, compiling
that config alone if the cache lacks it. The operator library (``libfused_swiglu_torch.so``, from
``csrc/torch/``) holds the operators' CUDA kernels; :func:`load_torch_ops` loads it and binds it to
the kernel library's entry points and to a plan callback (:mod:`fused_swiglu._plans`), through
which the C++ side asks the Python config choice for a launch plan once per problem. ``Library.run`` launches one config
through ctypes directly (tests and tuning; the operators do not use it).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from ._abi import ABI_VERSION
from .errors import BuildError, UnsupportedError

DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1}  # fsw_dtype
DTYPE_NAMES = {0: "bf16", 1: "fp16", 2: "e4m3"}
E4M3_CODE = 2  # fsw_dtype of float8_e4m3fn inputs (fused_swiglu.fp8)
Y_SCALE_STATIC, Y_SCALE_GROUP128 = 1, 2  # fsw_problem.y_scale_mode: FSW_Y_SCALE_STATIC, FSW_Y_SCALE_GROUP128
KERNEL_NAMES = {0: "packed", 1: "dual", 2: "dswiglu", 3: "grouped_dual"}  # fsw_kernel_kind


class Status(enum.IntEnum):
    """fsw_status."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    NOT_SUPPORTED = 2
    CUDA = 3
    INTERNAL = 4


class Problem(ctypes.Structure):
    """fsw_problem: row-major matrices, ld* are row strides in elements."""

    _fields_ = [
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("dtype", ctypes.c_int32),
        ("raster", ctypes.c_int32),
        ("swizzle", ctypes.c_int32),
        ("x", ctypes.c_void_p),  # (M, K)
        ("ldx", ctypes.c_int64),
        ("w", ctypes.c_void_p),  # PACKED: (2N, K); DUAL: W_gate (N, K)
        ("ldw", ctypes.c_int64),
        ("w_up", ctypes.c_void_p),  # DUAL: W_up (N, K); PACKED: NULL
        ("ldw_up", ctypes.c_int64),
        ("y", ctypes.c_void_p),  # (M, N)
        ("ldy", ctypes.c_int64),
        ("g", ctypes.c_void_p),  # (M, N) pre-activations: written by a store config, read by dswiglu
        ("u", ctypes.c_void_p),
        ("ldgu", ctypes.c_int64),
        ("dg", ctypes.c_void_p),  # dswiglu: (M, N) gradients it writes
        ("du", ctypes.c_void_p),
        ("lddgu", ctypes.c_int64),
        ("x_scale", ctypes.c_void_p),  # e4m3: fp32 (M,) or (1,) token scales
        ("w_scale", ctypes.c_void_p),  # e4m3: fp32 (2N,) or (1,) weight-row scales
        ("x_scale_stride", ctypes.c_int32),  # 0: one scale, 1: one per token; block-scaled: between K blocks
        ("w_scale_stride", ctypes.c_int32),  # 0: one scale, 1: one per weight row; block-scaled: between K blocks
        ("y_scale", ctypes.c_void_p),  # e4m3 y: fp32 scale(s) read (static) or written (per 1 x 128 group)
        ("y_scale_stride_m", ctypes.c_int64),
        ("y_scale_stride_g", ctypes.c_int64),
        ("y_scale_mode", ctypes.c_int32),  # 1: static, 2: per 1 x 128 group; 0 for 16-bit y
        ("experts", ctypes.c_int64),  # grouped: E; else 0
        ("ldw_expert", ctypes.c_int64),  # grouped: elements between two experts' weights; else 0
        ("tile_expert", ctypes.c_void_p),  # grouped: int32 (M / tile_n,) expert of each token tile; else NULL
    ]


# The same layout as Problem / fsw_problem: three int64, three int32 and padding, (pointer, int64) x 4, then
# (pointer, pointer, int64) x 2, two pointers and two int32, a pointer, two int64, one int32 and padding, two
# int64 and a pointer.
_PROBLEM = struct.Struct("<qqqiii4xQqQqQqQqQQqQQqQQiiQqqi4xqqQ")  # pad bytes where C aligns to 8
assert _PROBLEM.size == ctypes.sizeof(Problem), "fsw_problem layout mismatch"


class _ConfigInfo(ctypes.Structure):
    """fsw_config_info: the name, then int32 fields only."""

    _fields_ = [("name", ctypes.c_char_p)] + [(field, ctypes.c_int32) for field in (
        "kind", "dtype", "out_dtype", "tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n", "pingpong", "stages",
        "promote_k_tiles", "smem_bytes", "epilogue_smem_bytes", "swap_ab", "preactivations", "block_scaled")]


@dataclass(frozen=True)
class ConfigInfo:
    """One compiled kernel configuration of the library.

    ``kernel`` is ``"packed"`` or ``"dual"``; ``dtype`` (x's and the weights') is ``"bf16"``, ``"fp16"``
    or ``"e4m3"``, ``out_dtype`` y's (``"bf16"``, ``"fp16"`` or ``"e4m3"``); ``tile_n``
    counts gate + up columns; ``schedule`` is ``"pingpong"`` or ``"cooperative"``; ``promote_k_tiles``
    is 0 when GMMA accumulates all of K, else the k-tiles per partial sum added into fp32;
    ``stages``: mainloop pipeline
    stages; ``smem_bytes``: shared memory per CTA in bytes, of which ``epilogue_smem_bytes`` for
    the collective epilogue (with the SwiGLU node's output buffers); ``swap_ab``: the GEMM takes the
    weights as GMMA's A operand (``tile_m`` weight rows by ``tile_n`` tokens; small M);
    ``preactivations``: the training forward, which also writes the gate and up pre-activations;
    ``block_scaled``: e4m3 scales per 128-deep K block, applied in the mainloop.
    ``kernel`` ``"dswiglu"``: the backward's GEMM through the down projection (``tile_n`` counts
    output columns).
    """

    index: int
    name: str
    kernel: str
    dtype: str
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    schedule: Literal["pingpong", "cooperative"]
    stages: int
    promote_k_tiles: int = 0
    smem_bytes: int = 0
    epilogue_smem_bytes: int = 0
    swap_ab: bool = False
    preactivations: bool = False
    out_dtype: str = ""
    block_scaled: bool = False


_SIGNATURES = {
    "fsw_abi_version": ([], ctypes.c_int),
    "fsw_last_error": ([], ctypes.c_char_p),
    "fsw_num_configs": ([], ctypes.c_int),
    "fsw_config_name": ([ctypes.c_int], ctypes.c_char_p),
    "fsw_config_loaded": ([ctypes.c_int], ctypes.c_int),
    "fsw_load_config": ([ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
    "fsw_get_config": ([ctypes.c_int, ctypes.POINTER(_ConfigInfo)], ctypes.c_int),
    # the fsw_problem* is passed as the address of a buffer filled by _PROBLEM.pack_into
    "fsw_can_implement": ([ctypes.c_int, ctypes.c_void_p], ctypes.c_int),
    "fsw_workspace_size": ([ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
    "fsw_run": ([ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], ctypes.c_int),
    "fsw_quantize_e4m3_groups": ([ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                  ctypes.c_int64, ctypes.c_void_p], ctypes.c_int),
    "fsw_moe_layout": ([ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                        ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
}


class Library:
    """A loaded core library (``libfused_swiglu.so``) with its ABI checked and its configs named.

    ``names`` / ``index``: every config the core library lists (``capi/registry.inc``), loaded or
    not. ``config_dirs``: folders searched for a config's ``libfsw_<name>.so`` before the cache.
    """

    def __init__(self, path: str | Path, config_dirs: tuple[Path, ...] = ()):
        self.path = Path(path)
        self.config_dirs = tuple(Path(d) for d in config_dirs)
        try:
            self._dll = ctypes.CDLL(str(self.path))
        except OSError as e:
            raise BuildError(f"cannot load the kernel library {self.path}: {e}") from e
        for fn_name, (argtypes, restype) in _SIGNATURES.items():
            try:
                fn = getattr(self._dll, fn_name)
            except AttributeError as e:
                raise BuildError(
                    f"the kernel library {self.path} does not export {fn_name}; rebuild it "
                    "(`fused-swiglu build`) from matching sources"
                ) from e
            fn.argtypes, fn.restype = argtypes, restype
        found = self._dll.fsw_abi_version()
        if found != ABI_VERSION:
            raise BuildError(
                f"the kernel library {self.path} has ABI version {found} but this fused_swiglu needs "
                f"{ABI_VERSION}; rebuild it with `fused-swiglu build` (or unset FUSED_SWIGLU_LIBRARY)"
            )
        self.ordered_names = [self._dll.fsw_config_name(i).decode() for i in range(self._dll.fsw_num_configs())]
        self.index = {name: i for i, name in enumerate(self.ordered_names)}
        self.names = frozenset(self.index)
        self.config_paths: dict[str, Path] = {}  # configs this object loaded: the file each came from
        self._infos: dict[int, ConfigInfo] = {}
        self._load_lock = threading.RLock()
        self._inputs = None  # the build cache's inputs, or the BuildError of gathering them
        self._workspace_bytes: dict[tuple, int] = {}
        # fsw_problem lives in one buffer per thread that struct.pack_into fills on every launch
        self._tls = threading.local()

    def is_loaded(self, name: str) -> bool:
        """Whether config ``name``'s library is loaded in this process."""
        idx = self.index.get(name)
        return idx is not None and bool(self._dll.fsw_config_loaded(idx))

    def ensure(self, name: str) -> int:
        """The index of config ``name``, loading its library first if needed (from a prebuilt folder,
        else the cache, compiling it into the cache if missing).

        Raises:
            UnsupportedError: the core library lists no config of that name.
            BuildError: its library is not prebuilt and cannot be built (no nvcc, a failed build), or
                it does not load (another ABI version, another config).
        """
        idx = self.index.get(name)
        if idx is None:
            raise UnsupportedError(
                f"config {name!r} is not in the kernel library; available: {', '.join(self.ordered_names) or 'none'}"
            )
        if self._dll.fsw_config_loaded(idx):
            return idx
        with self._load_lock:
            if not self._dll.fsw_config_loaded(idx):
                path = self._locate(name)
                out = ctypes.c_int(-1)
                status = self._dll.fsw_load_config(str(path).encode(), ctypes.byref(out))
                if status != Status.SUCCESS:
                    raise BuildError(f"loading config {name}: {self.last_error()}")
                if out.value != idx:
                    raise BuildError(f"{path} holds config {self.ordered_names[out.value]}, not {name}")
                self.config_paths[name] = path
        return idx

    def find(self, name: str) -> Path | None:
        """The library file config ``name`` would load from without a build (a prebuilt folder, then
        the cache), or None."""
        from .build import cache

        prebuilt = self._prebuilt(name)
        if prebuilt is not None:
            return prebuilt
        inputs = self._build_inputs()
        return cache.cached(name, inputs) if inputs is not None else None

    def _prebuilt(self, name: str) -> Path | None:
        """Config ``name``'s library in the first prebuilt folder that holds it, or None."""
        from .build import units

        for folder in self.config_dirs:
            candidate = folder / units.config_library(name)
            if candidate.is_file():
                return candidate
        return None

    def _build_inputs(self):
        """The build cache's inputs (sources, nvcc, CUTLASS), gathered once; None where they are missing."""
        if self._inputs is None:
            from .build import cache

            try:
                self._inputs = cache.Inputs()
            except BuildError as e:
                self._inputs = e
        return None if isinstance(self._inputs, BuildError) else self._inputs

    def _locate(self, name: str) -> Path:
        prebuilt = self._prebuilt(name)
        if prebuilt is not None:
            return prebuilt
        from .build import cache

        try:  # the cache's copy, compiled first if the cache lacks it
            if self._build_inputs() is None:
                raise self._inputs
            return cache.ensure_config(name, inputs=self._inputs)
        except BuildError as e:
            if not self.config_dirs:
                raise
            where = ", ".join(str(d) for d in self.config_dirs)
            raise BuildError(f"config {name} is not among the prebuilt libraries in {where}, and building it "
                             f"failed: {e}") from e

    def info(self, name: str) -> ConfigInfo:
        """Config ``name``'s tile, cluster, schedule and shared memory (loads it; see :meth:`ensure`)."""
        idx = self.ensure(name)
        if idx not in self._infos:
            self._infos[idx] = self._read_config(idx)
        return self._infos[idx]

    @property
    def configs(self) -> list[ConfigInfo]:
        """Every config's :class:`ConfigInfo` (loads, and if needed builds, every config library)."""
        return [self.info(name) for name in self.ordered_names]

    @property
    def _problem_buf(self) -> ctypes.Array:
        buf = getattr(self._tls, "buf", None)
        if buf is None:
            buf = self._tls.buf = (ctypes.c_char * _PROBLEM.size)()
        return buf

    @property
    def _problem_addr(self) -> int:
        return ctypes.addressof(self._problem_buf)

    def last_error(self) -> str:
        msg = self._dll.fsw_last_error()
        return msg.decode(errors="replace") if msg else ""

    def check(self, status: int, what: str) -> None:
        """Raise the Python exception for a non-success fsw_status, with fsw_last_error() text."""
        if status == Status.SUCCESS:
            return
        detail = self.last_error() or "no detail given"
        message = f"{what} failed: {detail}"
        if status == Status.INVALID_ARGUMENT:
            raise ValueError(message)
        if status == Status.NOT_SUPPORTED:
            raise UnsupportedError(message)
        kind = Status(status).name if status in Status._value2member_map_ else f"status {status}"
        raise RuntimeError(f"{message} ({kind})")

    def _read_config(self, idx: int) -> ConfigInfo:
        info = _ConfigInfo()
        self.check(self._dll.fsw_get_config(idx, ctypes.byref(info)), f"fsw_get_config({idx})")
        return ConfigInfo(
            index=idx,
            name=info.name.decode(),
            kernel=KERNEL_NAMES.get(info.kind, str(info.kind)),
            dtype=DTYPE_NAMES.get(info.dtype, str(info.dtype)),
            tile_m=info.tile_m,
            tile_n=info.tile_n,
            tile_k=info.tile_k,
            cluster_m=info.cluster_m,
            cluster_n=info.cluster_n,
            schedule="pingpong" if info.pingpong else "cooperative",
            stages=info.stages,
            promote_k_tiles=info.promote_k_tiles,
            smem_bytes=info.smem_bytes,
            epilogue_smem_bytes=info.epilogue_smem_bytes,
            swap_ab=bool(info.swap_ab),
            preactivations=bool(info.preactivations),
            out_dtype=DTYPE_NAMES.get(info.out_dtype, str(info.out_dtype)),
            block_scaled=bool(info.block_scaled),
        )

    def run(
        self,
        config_name: str,
        x: torch.Tensor,
        w: torch.Tensor,
        w_up: torch.Tensor | None,
        y: torch.Tensor,
        raster: int = 0,
        swizzle: int = 1,
        g: torch.Tensor | None = None,
        u: torch.Tensor | None = None,
        dg: torch.Tensor | None = None,
        du: torch.Tensor | None = None,
    ) -> None:
        """Launch ``config_name`` on x's current CUDA stream: ``y = silu(x @ Wg^T) * (x @ Wu^T)``.

        Args:
            x: ``(M, K)`` CUDA tensor, bf16/fp16, unit column stride, row stride a multiple of 8,
                16-byte aligned.
            w: packed ``(2N, K)`` (interleaved) for a packed config, ``W_gate (N, K)`` for a dual one.
            w_up: ``W_up (N, K)`` for a dual config, None for a packed one.
            y: ``(M, N)`` output, same dtype, written in place.
            raster: 0 heuristic, 1 along M, 2 along N. swizzle: 1, 2, 4 or 8.
            g, u: ``(M, N)`` views of one row stride: written beside y by a config with
                ``preactivations``, read by a ``dswiglu`` config.
            dg, du: ``(M, N)`` views of one row stride that a ``dswiglu`` config writes. For it, x is
                dZ ``(M, K)``, w is ``W_down (K, N)``, w_up and y are None.

        Raises:
            UnsupportedError: unknown config name (or the library declines the problem).
            BuildError: the config's library is not built and cannot be (see :meth:`ensure`).
            ValueError: the library rejects a shape, stride, pointer or dtype.
            RuntimeError: a CUDA or internal error.
        """
        if x.dtype not in DTYPE_CODES:
            raise TypeError(f"x must be torch.bfloat16 or torch.float16; got x.dtype={x.dtype}")
        m, k = x.shape
        n = y.shape[1] if y is not None else dg.shape[1]
        ptr = lambda t: t.data_ptr() if t is not None else 0  # noqa: E731
        ld = lambda t: t.stride(0) if t is not None else 0  # noqa: E731
        self.launch(config_name, x.dtype, x.get_device(), m, n, k, x.data_ptr(), x.stride(0), w.data_ptr(),
                    w.stride(0), ptr(w_up), ld(w_up), ptr(y), ld(y), ptr(g), ptr(u), ld(g), ptr(dg), ptr(du),
                    ld(dg), raster, swizzle)

    def launch(self, config_name: str, dtype: torch.dtype, device: int, m: int, n: int, k: int, x: int, ldx: int,
               w: int, ldw: int, w_up: int = 0, ldw_up: int = 0, y: int = 0, ldy: int = 0, g: int = 0, u: int = 0,
               ldgu: int = 0, dg: int = 0, du: int = 0, lddgu: int = 0, raster: int = 0, swizzle: int = 1,
               x_scale: int = 0, w_scale: int = 0, x_scale_stride: int = 0, w_scale_stride: int = 0,
               y_scale: int = 0, y_scale_stride_m: int = 0, y_scale_stride_g: int = 0, y_scale_mode: int = 0,
               experts: int = 0, ldw_expert: int = 0, tile_expert: int = 0) -> None:
        """:meth:`run` on raw operands: device addresses (ints, 0 for none) and row strides in elements,
        on the current stream of CUDA device ``device`` (its index; the caller makes it current).
        ``dtype`` ``torch.float8_e4m3fn`` takes the fp32 scales ``x_scale`` / ``w_scale`` (addresses)
        with strides 0 (one value) or 1 (one per token / weight row); a config with e4m3 y takes its fp32
        scales ``y_scale`` (mode 1: one static scale read; 2: one per 1 x 128 group written at
        ``m * y_scale_stride_m + g * y_scale_stride_g``). A grouped config takes ``experts`` (E), ``ldw_expert``
        (elements between two experts' weights) and ``tile_expert`` (the address of the int32 expert of each
        token tile; ``include/fused_swiglu.h``, FSW_KERNEL_GROUPED_DUAL). Raises as :meth:`run`."""
        config = self.ensure(config_name)
        # fsw_problem packed in one call (cheaper per launch than filling a ctypes.Structure)
        _PROBLEM.pack_into(
            self._problem_buf, 0, m, n, k, E4M3_CODE if dtype == torch.float8_e4m3fn else DTYPE_CODES[dtype],
            raster, swizzle, x, ldx, w, ldw, w_up, ldw_up, y, ldy, g, u, ldgu, dg, du, lddgu,
            x_scale, w_scale, x_scale_stride, w_scale_stride, y_scale, y_scale_stride_m, y_scale_stride_g, y_scale_mode,
            experts, ldw_expert, tile_expert,
        )
        problem = self._problem_addr
        # One C call per launch: fsw_run checks the problem itself (can_implement). The workspace
        # size depends only on the config and the problem shape, so it is asked once per shape.
        key = (config, m, n, k, raster, swizzle)
        nbytes = self._workspace_bytes.get(key)
        if nbytes is None:
            size = ctypes.c_size_t(0)
            self.check(
                self._dll.fsw_workspace_size(config, problem, ctypes.byref(size)),
                f"{config_name}: fsw_workspace_size",
            )
            nbytes = self._workspace_bytes[key] = size.value
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}") if nbytes > 0 else None
        status = self._dll.fsw_run(
            config, problem, workspace.data_ptr() if workspace is not None else None, nbytes, _current_stream(device)
        )
        if status != Status.SUCCESS:
            self.check(status, f"{config_name}: fsw_run")

    def quantize_e4m3_groups(self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, scale_rows: int) -> None:
        """``fsw_quantize_e4m3_groups`` on the current stream of x's device: x ``(M, K)`` bf16/fp16 with
        unit column stride into q ``(M, K)`` e4m3 (unit column stride) and the fp32 scales ``scale``
        (``(scale_rows, ceil(K / 128))``, any strides the library accepts; rows past M get 0).

        Raises:
            TypeError: x is not bf16 or fp16.
            ValueError: the library rejects a shape, stride, pointer or dtype.
            RuntimeError: a CUDA error at launch.
        """
        if x.dtype not in DTYPE_CODES:
            raise TypeError(f"x must be torch.bfloat16 or torch.float16; got x.dtype={x.dtype}")
        device = x.get_device()
        status = self._dll.fsw_quantize_e4m3_groups(
            DTYPE_CODES[x.dtype], x.shape[0], x.shape[1], x.data_ptr(), x.stride(0), q.data_ptr(), q.stride(0),
            scale.data_ptr(), scale.stride(0), scale.stride(1), scale_rows, _current_stream(device))
        self.check(status, "fsw_quantize_e4m3_groups")


def _current_stream(device: int) -> int:
    """cudaStream_t of the current stream of CUDA device ``device`` (the raw-handle query PyTorch's own
    compiled code uses, which skips building a Stream object; the public API otherwise)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device)
    return torch.cuda.current_stream(device).cuda_stream


_lock = threading.Lock()
_library: Library | None = None
_torch_ops: ctypes.CDLL | None = None

TORCH_DTYPES = {**{code: dtype for dtype, code in DTYPE_CODES.items()}, E4M3_CODE: torch.float8_e4m3fn}
PLAN_FN = ctypes.CFUNCTYPE(  # the operator library's plan callback (fsw_torch_bind)
    ctypes.c_int, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
    ctypes.c_int32,
    ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
    ctypes.c_void_p, ctypes.c_size_t,
)


@functools.lru_cache(maxsize=None)
def target(device: int) -> tuple[int, str, int | None]:
    """What the config choice reads of CUDA device ``device``: ``(SM count, device name, shared memory
    per block with opt-in in bytes, or None where torch does not report it)``."""
    props = torch.cuda.get_device_properties(device)
    return props.multi_processor_count, props.name, getattr(props, "shared_memory_per_block_optin", None)


def load_torch_ops(plan_fn, before_load=None) -> None:
    """Load the operator library (building it, and the kernel library, if needed) and bind it; once
    per process. ``plan_fn``: a :data:`PLAN_FN` the C++ side calls for a launch plan on a plan-cache
    miss (:data:`fused_swiglu._plans.PLAN`; the caller keeps it alive). ``before_load`` runs just
    before the load (the ops drop their lazy CUDA kernel there, so that the C++ registration
    replaces no kernel).

    Raises:
        BuildError: a library could not be built or loaded; this PyTorch has no CUDA.
    """
    global _torch_ops
    if _torch_ops is not None:
        return
    lib = library()
    with _lock:
        if _torch_ops is not None:
            return
        from .build import torch_ops

        path = torch_ops.ensure_built()
        if before_load is not None:
            before_load()
        try:
            dll = ctypes.CDLL(str(path))
        except OSError as e:
            raise BuildError(f"cannot load the operator library {path}: {e}") from e
        dll.fsw_torch_bind.argtypes = [ctypes.c_void_p] * 6
        dll.fsw_torch_bind.restype = ctypes.c_int
        dll.fsw_torch_clear_plans.restype = None
        dll.fsw_torch_num_plans.restype = ctypes.c_int64
        addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
        status = dll.fsw_torch_bind(
            addr(lib._dll.fsw_run), addr(lib._dll.fsw_workspace_size), addr(lib._dll.fsw_last_error), addr(plan_fn),
            addr(lib._dll.fsw_quantize_e4m3_groups), addr(lib._dll.fsw_moe_layout),
        )
        if status != 0:
            raise BuildError(f"the operator library {path} found no CUDA in this PyTorch ({torch.__version__})")
        _torch_ops = dll


def clear_plans() -> None:
    """Forget the operators' cached launch plans (each problem asks the config choice again)."""
    if _torch_ops is not None:
        _torch_ops.fsw_torch_clear_plans()


def num_plans() -> int:
    """Launch plans the operators hold (0 before the first CUDA call)."""
    return int(_torch_ops.fsw_torch_num_plans()) if _torch_ops is not None else 0


def library() -> Library:
    """The process's core library, loaded on first call (FUSED_SWIGLU_LIBRARY, else the wheel's
    prebuilt copy, else the cache); configs load on first use (:meth:`Library.ensure`).

    Raises:
        BuildError: no library could be built or loaded, or its ABI version differs.
    """
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                from .build import prebuilt

                path = prebuilt.core_library()
                if path is None:
                    from .build.cache import ensure_core

                    _library = Library(ensure_core())
                elif not path.is_file():
                    raise BuildError(f"FUSED_SWIGLU_LIBRARY points at {path}, which is not a file")
                else:
                    _library = Library(path, config_dirs=(path.parent,))
    return _library


def is_loaded() -> bool:
    return _library is not None


def configs() -> list[ConfigInfo]:
    """Every config of the library (loads, and if needed builds, every config library)."""
    return list(library().configs)


def config_names() -> frozenset[str]:
    """Every config name the core library lists (loads no config)."""
    return library().names


def run(config_name: str, x: torch.Tensor, *operands, **options) -> None:
    """Launch one kernel on the current stream of x's device (made current for the launch where another
    device is): :meth:`Library.run`, whose arguments it takes."""
    lib = library()
    elsewhere = x.device.index is not None and x.device.index != torch.cuda.current_device()
    with torch.cuda.device(x.device) if elsewhere else contextlib.nullcontext():
        lib.run(config_name, x, *operands, **options)
