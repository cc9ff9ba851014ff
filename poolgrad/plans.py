"""The per-call path: plans cached by call key, so repeated calls skip validation and planning.

Every public operator is written as two steps.  *Planning* validates every argument that does not depend on the
data (types, ranks, dtypes, shapes, strides, flags, parameters, modes, thread count), computes window tables, work
items and kernel choices, and returns a plan: a callable that takes the call's arrays.  *Running* a plan does only
what depends on the data: it checks that ``out=`` shares no memory with an input, allocates outputs, runs the
kernels (which range-check indices) and returns.

A call first builds its key (``_callkey.make_key``, compiled: exact array types, dtypes, shapes, strides, flags,
every parameter with its type, the determinism default, ``omp_get_max_threads()``).  Equal keys mean planning
would take the same decisions and raise the same errors, so a cached plan is run directly.  A call whose key is
None (an argument that is not a plain ndarray or of an unusual parameter type) is planned every time and never
cached: errors and messages are exactly those of planning.

The cache holds each plan in a :class:`~poolgrad._launch.Runner`: once the plan's first run has recorded its
kernel call (the plan's ``launch``), later calls replay that record in compiled code and fall back to the plan
itself whenever the data needs its checks (see ``_launch.pyx``).

Plans hold no per-call state (scratch sets are taken from pools, launch records are read-only once made), so one
plan serves several Python threads at once.  The cache holds at most :data:`MAX_PLANS` plans; when full it is
emptied (a workload that cycles through more shapes than that pays planning again, nothing more).
"""
from __future__ import annotations

from typing import Any, Callable

from ._callkey import make_key
from ._launch import Runner

__all__ = ["MAX_PLANS", "call", "clear", "plan_count", "make_key", "OP_IDS"]

#: One id per public operator (the first item of every key).
OP_IDS = {name: i for i, name in enumerate((
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "adaptive_max_pool2d",
    "adaptive_max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward", "max_pool", "max_pool_grad",
    "max_pooling_grad"), start=1)}

# Enough for every pooling layer of the biggest common CNNs in both directions, several batch sizes and dtypes.
MAX_PLANS = 1024

_plans: dict[tuple, Runner] = {}


def call(key: tuple | None, arrays: tuple, build: Callable[[], tuple[Callable[..., Any], tuple]]) -> Any:
    """Run one call: the cached plan for ``key`` on ``arrays``, or else ``build()``, which validates everything
    (raising what the operator raises) and returns the plan and the validated arrays to run it on.  The plan is
    cached when ``key`` is not None."""
    if key is not None:
        runner = _plans.get(key)
        if runner is not None:
            return runner(*arrays)
    plan, arrays = build()
    if key is None:
        return plan(*arrays)
    if len(_plans) >= MAX_PLANS:
        _plans.clear()
    runner = _plans[key] = Runner(plan)
    return runner(*arrays)


def clear() -> None:
    """Forget every cached plan (the next calls plan again).  Tests call it after changing a planner constant."""
    _plans.clear()


def plan_count() -> int:
    """How many plans are cached now."""
    return len(_plans)
