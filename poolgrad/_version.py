"""The version of poolgrad: the one place it is written.

setup.py reads it through ``[tool.setuptools.dynamic]`` in pyproject.toml (statically, without importing
poolgrad), and ``poolgrad.__version__`` re-exports it, so sdist, wheel and editable installs all agree.
"""
__version__ = "0.1.0"
