"""Type stub of the compiled module ``poolgrad._bandwidth`` (built from ``_bandwidth.pyx``)."""
from typing import Any

def copy(src: Any, dst: Any, nthreads: int) -> int: ...
