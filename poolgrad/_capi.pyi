"""Type stub of the compiled module ``poolgrad._capi`` (the plan object and the C API's capsule)."""
from typing import Any, Callable

import numpy as np

ABI_VERSION: int
_C_API: object

def gil_executes() -> int: ...

class _Spec:
    name: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    aligned: bool
    writeable: bool

class Plan:
    operator: str
    names: tuple[str, ...]
    specs: tuple[_Spec, ...]
    has_out: bool
    deterministic: bool | None
    num_threads: int
    def __init__(self, operator: str, run: Callable[..., Any], names: tuple[str, ...],
                 arrays: tuple[np.ndarray[Any, Any], ...], out: np.ndarray[Any, Any] | None, takes_out: bool,
                 deterministic: bool | None, num_threads: int) -> None: ...
    def __call__(self, *arrays: np.ndarray[Any, Any], out: np.ndarray[Any, Any] | None = None) -> Any: ...
