"""Slow, obviously-correct pure-NumPy reference implementations of every poolgrad operator.

They share no code with the compiled kernels beyond argument parsing, accumulate in float64, loop in Python
over output positions, and exist to test the fast paths (the idea of bottleneck's ``slow`` package).  Arrays are
logical NCHW 4-D (``max_pooling_grad``: any shape); parameters are already-parsed (h, w) tuples.
"""
from .adaptive import adaptive_max_pool2d, adaptive_max_pool2d_backward
from .avg_pool import avg_pool2d, avg_pool2d_backward
from .elementwise import max_pooling_grad
from .max_pool_indices import max_pool2d_with_indices, max_pool2d_with_indices_backward
from .tf_max_pool import max_pool, max_pool_grad

__all__ = ["max_pool2d_with_indices", "max_pool2d_with_indices_backward", "adaptive_max_pool2d",
           "adaptive_max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward", "max_pool", "max_pool_grad",
           "max_pooling_grad"]
