"""Build the Cython example against poolgrad's header and .pxd: ``python setup.py build_ext --inplace``."""
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

import poolgrad

openmp = [] if sys.platform == "darwin" else ["-fopenmp"]
setup(name="pg_cy_example", ext_modules=cythonize(
    [Extension("pg_cy_example", ["pg_cy_example.pyx"], include_dirs=[poolgrad.get_include()],
               extra_compile_args=openmp, extra_link_args=openmp)],
    include_path=[poolgrad.get_include()], language_level=3))
