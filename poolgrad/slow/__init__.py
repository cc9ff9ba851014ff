"""Slow, obviously-correct pure-NumPy reference implementations of every poolgrad operator.

They share no code with the compiled kernels beyond argument parsing, accumulate in float64, loop in Python
over output positions, and exist to test the fast paths (the idea of bottleneck's ``slow`` package).  Arrays are
logical NCHW 4-D; the public wrappers in the test-suite handle layouts.
"""
from .max_pool import max_pool2d_with_indices, max_pool2d_with_indices_backward

__all__ = ["max_pool2d_with_indices", "max_pool2d_with_indices_backward"]
