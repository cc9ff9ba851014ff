"""The kernels' drivers shared by the index-returning poolings (max, adaptive max, and TF max's argmax):
the argmax forward over any per-axis window tables, the vectorised forward for PyTorch-style windows, and the
validated tail of the index-scatter backward.  Operator modules validate, then call these.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from . import _max_pool_indices
from ._launch import Launch
from ._scatter import ScatterPlan
from .config import resolve_deterministic, resolve_num_threads
from .dtypes import kernel_view
from .errors import ParamInvalidError
from .geometry import PoolGeometry, logical_shape, to_nchw
from .memory import OutputLayout, ScratchPool, kernel_friendly, kernel_input, kernel_output, read_only, thread_rows
from .planning import channel_inner, threads_for
from .validation import check_allocatable, check_no_overlap, parse_index_dtype, prepare_out

__all__ = ["ArgmaxPlan", "PlaneArgmax", "ScatterBackwardPlan", "UniformArgmax", "uniform_argmax"]

# The vectorised forward keeps one float64 and one int32 scratch row of Wo (times C) lanes per thread and a
# table entry per kernel cell; beyond these sizes the per-window kernel runs instead.
UNIFORM_MAX_ROW = 1 << 20       # also bounds W (times C), the phase-split input row of strided windows
UNIFORM_MAX_CELLS = 1 << 16
# Planes (not channels-last) up to a size run as channels-last tiles of 32-64 planes (``PlaneArgmax``),
# PyTorch-style and adaptive windows alike.  The tiles cost two copies per element whatever the windows; the row
# kernel they replace pays per output row and per window cell, so the tiles win up to larger planes the more
# window cells there are per input cell (``density``: 1 for k2s2, 2.25 for k3s2, 9 for k3s1).  Measured,
# 2x64xHxH float32 at one thread, ns per input element, tiles / row kernel (fastest of 9, CPU time of the
# thread, loaded machine): k2s2 H=48 1.38 / 2.01, 56 1.55-1.91 / 3.05-3.37, 64 1.76-1.93 / 1.50-1.58, 80
# 2.35 / 1.04; k3s2p1 H=80 1.35 / 2.32, 96 1.88 / 1.90, 112 1.74-2.23 / 2.02-2.83, 128 1.97 / 1.86, 144 2.22 /
# 1.77; k3s1p1 H=112 5.35 / 7.31, 120 5.37 / 7.02, 128 6.73-7.05 / 5.34-6.77, 144 4.91 / 4.96.  The limits sit
# where the two meet, so that neither side of a limit is more than 1.5x dearer per element than the other
# (the row kernel's own steps with W, such as k2s2 64 -> 72, 1.58 -> 2.73, are not the tiles').  So (density
# up to, most cells per plane):
PLANES_MAX_CELLS = ((1.5, 56 * 56), (4.0, 96 * 96), (float("inf"), 120 * 120))
# Among those, 2x2 windows that tile the planes exactly (kernel 2 stride 2 on even sizes, adaptive halving; float32
# and float64, output rows of at most one AVX-512 vector) run on the planes as they lie, without the tiles'
# transposing copies (``_max_pool_indices.argmax_forward_planes`` with ``flat``; pg_flat2 in pg_argmax.h), where
# a vector of outputs - whole small planes side by side where they lie one after another, else whole output rows
# of one plane - fills at least FLAT_MIN_FILL of its lanes.  Measured, one thread, Launch.kernel_ns medians of 7
# interleaved rounds on a loaded machine (``PYTHONPATH=. python bench/experiments/maxflat_kernels.py [--dtype
# float64] [--apart]``), tiles time / flat time: float32, planes one after another, 1.77-5.77 (8x64 planes of
# 2x2 - 6x6, 2x16x8x8 2.76, 8x16x8x8, 1x / 8x832x14x14, 1x64x28x28, 8x64x32x32), float64 1.71-4.81; planes apart
# (every other channel: rows of one plane per vector), float32 by lanes filled of 16: 1 0.51, 3 0.91, 4 1.00, 8
# 1.39, 9 1.57, 16 2.34; float64 of 8: 1 0.66, 3 1.21, 4 1.30.
FLAT_2X2 = True
FLAT_MIN_FILL = 0.3


class ArgmaxPlan:
    """Shared forward: window max and flat argmax for any per-axis window tables (a plan: call it with ``x``).

    ``windows()`` builds the (height, width) tables; the first run calls it after allocating the outputs, so an
    output size that cannot exist fails in the allocation before any table of that length is built.
    ``uniform``: the windows are PyTorch-style ones from these parameters, which allows the vectorised kernel.
    """

    def __init__(self, x: np.ndarray, dt: str, layout: str, windows: Callable[[], tuple[dict, dict]],
                 step: tuple[int, int], out_hw: tuple[int, int], index_dtype: Any, nthreads: int,
                 uniform: PoolGeometry | None = None) -> None:
        x4 = to_nchw(x, layout)
        self.idt, self.it = parse_index_dtype(index_dtype, x4.shape[2] * x4.shape[3])
        self.dt, self.layout, self.windows, self.step, self.uniform = dt, layout, windows, step, uniform
        self.shape = logical_shape(x, layout, x4.shape[1], *out_hw)
        check_allocatable(self.shape, "x", f"the output of x of shape {x.shape}")
        self.order = OutputLayout(x, self.shape)
        self.nthreads = nthreads
        self.tables: tuple | None = None
        self.fast: UniformArgmax | bool | None = None   # chosen on the first run, from the kernel views
        # the first run's kernel call, recorded for _launch.Runner (False: not replayable)
        self.launch: Launch | bool | None = None
        self.planes: PlaneArgmax | None = None

    def _tables(self, y_size: int) -> tuple:
        win_h, win_w = self.windows()
        if np.any(win_h["count"] == 0) or np.any(win_w["count"] == 0):
            raise ParamInvalidError("x: some pooling window contains no input cell (padding and dilation leave "
                                    "it entirely outside the input)")
        nthreads = threads_for(y_size * int(win_h["count"].max()) * int(win_w["count"].max()), self.nthreads)
        return win_h, win_w, nthreads

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = self.order.empty(x.dtype)
        ind = self.order.empty(self.idt)
        tables = self.tables
        if tables is None:
            tables = self.tables = self._tables(y.size)
        win_h, win_w, nthreads = tables
        if y.size == 0:                # N = 0 (C, Ho and Wo are at least 1)
            return y, ind
        layout = self.layout
        x4 = to_nchw(x, layout)
        xk = kernel_view(kernel_input(x4))
        y4 = kernel_view(to_nchw(y, layout))
        ind4 = to_nchw(ind, layout)
        planes = self.planes
        if planes is None:
            planes = self.planes = PlaneArgmax(self.dt, self.it, xk, ind4, win_h, win_w, nthreads)
        if planes.ok:
            planes.run(xk, y4, ind4, self.step)
        else:
            fast = self.fast
            if fast is None:
                u = self.uniform
                fast = self.fast = (UniformArgmax(self.dt, self.it, xk, ind4, u.kernel, u.stride, u.padding,
                                                  u.dilation, nthreads) if u is not None else False)
            if fast and fast.ok:
                fast.run(xk, y4, ind4)
            else:
                _max_pool_indices.argmax_forward(*self._window_args(xk, y4, ind4, win_h, win_w, nthreads))
        if self.launch is None:
            self.launch = self._launch(x, y, ind, xk, y4, ind4)
        return y, ind

    def _window_args(self, xk: np.ndarray, y4: np.ndarray, ind4: np.ndarray, win_h: dict[str, np.ndarray],
                     win_w: dict[str, np.ndarray], nthreads: int) -> tuple[Any, ...]:
        """Arguments of the per-window kernel (``argmax_forward``): the arrays at 2, 3, 4."""
        return (self.dt, self.it, xk, y4, ind4, win_h["start"], win_h["count"], self.step[0], win_w["start"],
                win_w["count"], self.step[1], channel_inner(xk), nthreads)

    def _launch(self, x: np.ndarray, y: np.ndarray, ind: np.ndarray, xk: np.ndarray, y4: np.ndarray,
                ind4: np.ndarray) -> Launch | bool:
        """The launch record of this plan's kernel call (sources x 0, y 1, indices 2), or False when the kernel
        reads a copy of x or the outputs come from the block cache."""
        uniform = self.fast
        planes = self.planes
        if planes is not None and planes.ok:
            mark = object()                         # stand-in for the scratch row set, found by identity
            rec = Launch(_max_pool_indices.argmax_forward_planes, planes.args_for(xk, y4, ind4, self.step, mark), 1,
                         kernel_records=True)
            if not rec.scratch(planes.scratch, mark):
                return False
        elif isinstance(uniform, UniformArgmax) and uniform.ok:
            marks = (object(), object(), object())     # stand-ins for the scratch rows, found by identity
            rec = Launch(_max_pool_indices.argmax_forward_uniform, uniform.args_for(xk, y4, ind4, marks), 1,
                         kernel_records=True)
            if not rec.scratch(uniform.scratch, marks):
                return False
        else:
            assert self.tables is not None     # made by the run that records
            win_h, win_w, nthreads = self.tables
            rec = Launch(_max_pool_indices.argmax_forward,
                         self._window_args(xk, y4, ind4, win_h, win_w, nthreads), 1, kernel_records=True)
        ok = (rec.output(y) and rec.output(ind) and rec.view(2, 0, x, xk) and rec.view(3, 1, y, y4)
              and rec.view(4, 2, ind, ind4))
        return rec if ok else False


class PlaneArgmax:
    """The forward for many small planes (logical-NCHW kernel views that are not channels-last): groups of 32
    to 64 planes (or one group of 8 to 31) are interleaved into a channels-last tile and run through the
    channels-last window kernel, vector lanes over planes (``_max_pool_indices.argmax_forward_planes``).
    ``ok`` is False where it does not apply: channels-last storage, planes too large for their windows
    (PLANES_MAX_CELLS), fewer than 8 planes (``_max_pool_indices.plane_groups``).  Any windows (PyTorch-style
    or adaptive) with no empty window; scratch pooled as in :class:`UniformArgmax`."""

    def __init__(self, dt: str, it: str, xk: np.ndarray, ind4: np.ndarray, win_h: dict[str, np.ndarray],
                 win_w: dict[str, np.ndarray], nthreads: int) -> None:
        N, C, H, W = xk.shape
        density = float(np.sum(win_h["count"])) * float(np.sum(win_w["count"])) / (H * W)
        max_cells = next(cells for top, cells in PLANES_MAX_CELLS if density <= top)
        self.groups = (_max_pool_indices.plane_groups(N * C, nthreads)
                       if not channel_inner(xk) and H * W <= max_cells else 0)
        self.ok = self.groups > 0
        if not self.ok:
            return
        self.dt, self.it, self.nthreads, self.win_h, self.win_w = dt, it, nthreads, win_h, win_w
        self.flat = FLAT_2X2 and _flat_fill(dt, xk, ind4) >= FLAT_MIN_FILL
        nbytes = _max_pool_indices.planes_scratch_bytes(dt, it, H, W, ind4.shape[2], ind4.shape[3], N * C,
                                                        self.groups)
        self.scratch = ScratchPool(lambda: thread_rows(nthreads, nbytes, np.uint8))

    def run(self, xk: np.ndarray, y4: np.ndarray | None, ind4: np.ndarray, step: tuple[int, int]) -> None:
        scratch = self.scratch.take()
        _max_pool_indices.argmax_forward_planes(*self.args_for(xk, y4, ind4, step, scratch))
        self.scratch.give(scratch)

    def args_for(self, xk: np.ndarray, y4: np.ndarray | None, ind4: np.ndarray, step: tuple[int, int],
                 scratch: Any) -> tuple[Any, ...]:
        """Arguments of ``argmax_forward_planes`` (the arrays at 2, 3, 4) over the window tables this instance
        was planned with, for run() and launch records."""
        win_h, win_w = self.win_h, self.win_w
        return (self.dt, self.it, xk, y4, ind4, win_h["start"], win_h["count"], step[0], win_w["start"],
                win_w["count"], step[1], self.groups, scratch, self.nthreads, self.flat)


def _flat_fill(dt: str, xk: np.ndarray, ind4: np.ndarray) -> float:
    """The share of a vector's lanes (16 float32 or 8 float64) the flat 2x2 forward fills: as many whole planes
    as fit where planes of at most half a vector of outputs lie one after another in x and the outputs (whose
    strides are ``ind4``'s), else as many whole output rows of one plane as fit; 0 for other types and output
    rows longer than a vector."""
    lanes = {"f32": 16, "f64": 8}.get(dt, 0)
    H, W = xk.shape[2], xk.shape[3]
    Ho, Wo = ind4.shape[2], ind4.shape[3]
    if not 0 < Wo <= lanes:
        return 0.0
    if 2 * Ho * Wo <= lanes and _in_a_row(xk, H * W) and _in_a_row(ind4, Ho * Wo):
        return lanes // (Ho * Wo) * Ho * Wo / lanes
    return min(lanes // Wo, Ho) * Wo / lanes


def _in_a_row(a: np.ndarray, cells: int) -> bool:
    """Whether the (n, c) planes of a logical-NCHW array lie one after another, ``cells`` elements apart."""
    step = a.itemsize * cells
    return (a.shape[1] == 1 or a.strides[1] == step) and (a.shape[0] == 1 or a.strides[0] == a.shape[1] * step)


class UniformArgmax:
    """The vectorised forward for PyTorch-style windows (output (oh, ow) covers rows oh*sh - ph + a*dh and
    columns ow*sw - pw + b*dw, clipped to the input) over logical-NCHW kernel views of one shape.  ``ok`` is
    False when the row or the kernel is too big for it.  Scratch rows are pooled: a run takes a set no other
    run holds (or allocates one), so one instance serves concurrent callers."""

    def __init__(self, dt: str, it: str, xk: np.ndarray, ind4: np.ndarray, kernel: tuple[int, int],
                 stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int],
                 nthreads: int) -> None:
        self.channel = channel = channel_inner(xk)
        cd = xk.shape[1] if channel else 1
        self.lanes = lanes = ind4.shape[3] * cd
        self.ok = not (max(lanes, xk.shape[3] * cd) > UNIFORM_MAX_ROW or kernel[0] * kernel[1] > UNIFORM_MAX_CELLS)
        if not self.ok:
            return
        self.args = (tuple(kernel), tuple(stride), tuple(padding), tuple(dilation),
                     *_uniform_tables(kernel, dilation, xk.shape[3], lanes, cd, stride[1]))
        self.dt, self.it, self.nthreads = dt, it, nthreads
        row_bytes = 2 * xk.shape[3] * cd * xk.dtype.itemsize
        self.scratch = ScratchPool(lambda: (thread_rows(nthreads, lanes, np.float64),
                                            thread_rows(nthreads, lanes, np.int32),
                                            thread_rows(nthreads, row_bytes, np.uint8)))

    def run(self, xk: np.ndarray, y4: np.ndarray | None, ind4: np.ndarray) -> None:
        scratch = self.scratch.take()
        _max_pool_indices.argmax_forward_uniform(*self.args_for(xk, y4, ind4, scratch))
        self.scratch.give(scratch)

    def args_for(self, xk: np.ndarray, y4: np.ndarray | None, ind4: np.ndarray,
                 scratch: tuple[Any, ...]) -> tuple[Any, ...]:
        """Arguments of ``argmax_forward_uniform`` (the arrays at 2, 3, 4), for run() and launch records."""
        best, kidx, rows = scratch
        return (self.dt, self.it, xk, y4, ind4, *self.args, self.channel, best, kidx, rows, self.nthreads)


def uniform_argmax(dt: str, it: str, xk: np.ndarray, y4: np.ndarray | None, ind4: np.ndarray,
                   kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                   dilation: tuple[int, int], nthreads: int) -> bool:
    """One run of :class:`UniformArgmax` (``y4`` None computes the indices only).  Returns False, having done
    nothing, when the row or the kernel is too big for it."""
    fast = UniformArgmax(dt, it, xk, ind4, kernel, stride, padding, dilation, nthreads)
    if fast.ok:
        fast.run(xk, y4, ind4)
    return fast.ok


@functools.lru_cache(maxsize=256)
def _uniform_tables(kernel: tuple[int, int], dilation: tuple[int, int], W: int, lanes: int, cd: int,
                    sw: int) -> tuple[np.ndarray, ...]:
    """The vectorised forward's kernel-cell offsets (rows, columns, flat) and each lane's first input column
    (read-only, cached: they depend on shapes and parameters only)."""
    (kh, kw), (dh, dw) = kernel, dilation
    koff_h = np.repeat(np.arange(kh, dtype=np.int64) * dh, kw)
    koff_w = np.tile(np.arange(kw, dtype=np.int64) * dw, kh)
    return read_only(koff_h, koff_w, koff_h * W + koff_w, np.arange(lanes, dtype=np.int64) // cd * sw)


class ScatterBackwardPlan:
    """The validated tail shared by the max and adaptive max backwards (a plan: call it with the arrays):
    allocate grad_x (or check ``out``), run the scatter kernels."""

    def __init__(self, x: np.ndarray, grad_output: np.ndarray, indices: np.ndarray, layout: str, dt: str,
                 it: str, win_h: dict, win_w: dict, out: Any, deterministic: Any, num_threads: Any) -> None:
        self.det = resolve_deterministic(deterministic)
        self.nthreads = resolve_num_threads(num_threads)
        if out is not None:
            prepare_out(out, x, [("grad_output", grad_output), ("x", x), ("indices", indices)])
        self.layout, self.dt, self.it, self.row_lo, self.row_hi = layout, dt, it, win_h["lo"], win_h["hi"]
        self.col_lo, self.col_hi = win_w["lo"], win_w["hi"]
        self.order = OutputLayout(x, x.shape)
        self.scatter: ScatterPlan | None = None     # planned on the first run, from the kernel views' strides
        # the first run's kernel call, recorded for _launch.Runner, which replays it on later calls
        self.launch: Launch | bool | None = None

    def __call__(self, grad_output: np.ndarray, x: np.ndarray, indices: np.ndarray, out: Any) -> np.ndarray:
        # A large output allocated here may be freshly mapped memory, whose pages the OS zero-fills on first
        # touch: then the kernels skip zeroing it (a full write of grad_x saved).  Recycled or small blocks hold
        # old data.
        if out is None:
            gx, fresh_zeros = self.order.empty_zeroed(x.dtype)
        else:
            check_no_overlap(out, (("grad_output", grad_output), ("x", x), ("indices", indices)))
            gx, fresh_zeros = out, False
        layout = self.layout
        gx4 = to_nchw(gx, layout)
        if gx4.shape[0] == 0:
            return gx
        go4 = to_nchw(grad_output, layout)
        ind4 = to_nchw(indices, layout)
        scatter = self.scatter
        if scatter is None:
            # Which arrays the kernels can address directly is fixed by the call key (strides, alignment flags).
            self.direct = (kernel_output(gx4) is gx4, kernel_friendly(go4), kernel_friendly(ind4))
        direct_out, direct_go, direct_ind = self.direct
        target = gx4 if direct_out else kernel_output(gx4)
        gok = kernel_view(go4 if direct_go else kernel_input(go4))
        if not direct_ind:
            ind4 = kernel_input(ind4)
        gxk = kernel_view(target)
        if scatter is None:
            scatter = self.scatter = ScatterPlan(self.dt, self.it, gok, gxk, self.row_lo, self.row_hi, self.det,
                                                 self.nthreads, col_lo=self.col_lo, col_hi=self.col_hi)
        scatter.run(gok, ind4, gxk, prezeroed=fresh_zeros and direct_out)
        if not direct_out:
            gx4[...] = target
        if self.launch is None:
            self.launch = self._launch(scatter, grad_output, indices, gx, gok, ind4, gxk, out is None)
        return gx

    def _launch(self, scatter: ScatterPlan, grad_output: np.ndarray, indices: np.ndarray, gx: np.ndarray,
                gok: np.ndarray, ind4: np.ndarray, gxk: np.ndarray, allocates: bool) -> Launch | bool:
        """The launch record of this plan's run (sources grad_output 0, x 1, indices 2, grad_x 3), or False
        where a replay could not do what the run does: a copy of an array, a large grad_x (it comes from the
        block cache), an exact pass after the fast one."""
        rec = scatter.launch(gok, ind4, gxk)
        if rec is None or (allocates and not rec.output(gx)):
            return False
        if not allocates:
            rec.takes_out((0, 1, 2))
        ok = (rec.view(scatter.GX, 3, gx, gxk) and rec.view(scatter.GO, 0, grad_output, gok)
              and rec.view(scatter.IND, 2, indices, ind4))
        return rec if ok else False
