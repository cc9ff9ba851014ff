"""Type stub of the compiled module ``poolgrad._tf_max_pool`` (built from the template ``_tf_max_pool.pyx.in``).

The kernel entry points are internal (the typed public functions in the Python modules call them) and their
argument lists change with the kernels, so they are typed as ``Any`` here rather than kept in a second copy
that would go stale; the few attributes the Python side reads for configuration are typed.
"""
from typing import Any

def isa_level() -> int: ...
def __getattr__(name: str) -> Any: ...
