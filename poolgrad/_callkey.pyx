# cython: language_level=3
"""The compiled half of the per-call path (twin of ``plans.py``): turn one call's arguments into a hashable key.

A key captures everything validation and planning depend on - each array's exact type, dtype, shape, strides and
its aligned / writeable flags, every parameter's value *and type* (``True`` and ``1`` parse differently for
``kernel_size``), the resolved determinism default and ``omp_get_max_threads()`` now - so two calls with equal keys
pass or fail validation identically and get the same plan.  What depends on the data (index ranges, whether
``out=`` overlaps an input) is not in the key: plans check it on every call.

Anything unusual (a non-ndarray array argument, an ndarray subclass, a parameter of another type, a NumPy
integer) gives ``None``: the caller then takes the ordinary path, which validates and raises exactly as before.
Building a key costs well under a microsecond, against tens for the Python validation it lets a call skip.
"""
cimport numpy as cnp
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM

cnp.import_array()

cdef extern from "pg_parallel.h" nogil:
    int pg_omp_max_threads()

# Stand-ins for values whose Python equality would merge different validation outcomes: True == 1 and
# hash(True) == hash(1), but ``kernel_size=True`` is an error where ``kernel_size=1`` is not.
cdef object _TRUE = ("bool", True)
cdef object _FALSE = ("bool", False)
cdef object _SEQ = ("seq",)
cdef object _NONE_ARRAY = ("no array",)

cdef int _FLAG_BITS = cnp.NPY_ARRAY_ALIGNED | cnp.NPY_ARRAY_WRITEABLE

cdef object _det_default = False


def set_det_default(bint flag):
    """Mirror of ``config``'s process-wide determinism default (kept here so a key reads it without a call)."""
    global _det_default
    _det_default = bool(flag)


cdef inline bint _add_array(list parts, object a) except -1:
    cdef cnp.ndarray arr
    cdef int nd, i
    if a is None:
        parts.append(_NONE_ARRAY)
        return True
    if type(a) is not cnp.ndarray:
        return False
    arr = <cnp.ndarray>a
    nd = cnp.PyArray_NDIM(arr)
    parts.append(<object>cnp.PyArray_DESCR(arr))
    parts.append(nd)
    for i in range(nd):
        parts.append(cnp.PyArray_DIMS(arr)[i])
        parts.append(cnp.PyArray_STRIDES(arr)[i])
    parts.append(cnp.PyArray_FLAGS(arr) & _FLAG_BITS)
    return True


cdef inline bint _add_scalar(list parts, object v) except -1:
    cdef type t = type(v)
    if v is None or t is int or t is str:
        parts.append(v)
    elif t is bool:
        parts.append(_TRUE if v else _FALSE)
    elif t is type or t is cnp.dtype or isinstance(v, cnp.dtype):
        parts.append(v)         # index_dtype=np.int64 / np.dtype("int32"): hashable, compared by value
    else:
        return False
    return True


cdef inline bint _add_param(list parts, object v) except -1:
    cdef type t = type(v)
    if t is tuple or t is list:         # a list and a tuple of the same ints parse alike: one key
        parts.append(_SEQ)
        parts.append(len(v))
        for item in v:
            if not _add_scalar(parts, item):
                return False
        return True
    return _add_scalar(parts, v)


def make_key(int op, tuple arrays, tuple params):
    """Key of one call of operator ``op``: ``arrays`` are the array arguments (None allowed for an absent
    ``out``), ``params`` every other argument as passed, ``deterministic`` and ``num_threads`` included.
    Returns None when the call must take the ordinary validated path."""
    cdef list parts = [op, _det_default, pg_omp_max_threads()]
    cdef Py_ssize_t i
    for i in range(PyTuple_GET_SIZE(arrays)):
        if not _add_array(parts, <object>PyTuple_GET_ITEM(arrays, i)):
            return None
    for i in range(PyTuple_GET_SIZE(params)):
        if not _add_param(parts, <object>PyTuple_GET_ITEM(params, i)):
            return None
    return tuple(parts)
