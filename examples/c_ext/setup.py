"""Build the C example against poolgrad's header: ``python setup.py build_ext --inplace``."""
from setuptools import Extension, setup

import poolgrad

setup(name="pg_c_example", ext_modules=[
    Extension("pg_c_example", ["pg_c_example.c"], include_dirs=[poolgrad.get_include()],
              extra_compile_args=["-Wall", "-Werror=implicit-function-declaration"], extra_link_args=["-pthread"])])
