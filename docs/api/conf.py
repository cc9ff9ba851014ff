"""Sphinx configuration of poolgrad's API reference (pages generated from the docstrings).

Build from the repository root, after the compiled modules exist (``pip install -e .`` or
``python setup.py build_ext --inplace``)::

    python -m sphinx -W -b html docs/api build/api-html

``tests/test_docs.py`` runs exactly this build and fails on any warning.
"""
from __future__ import annotations

import os
import sys

# Document the poolgrad of this checkout (the repository root), not some other installed copy.
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import poolgrad  # noqa: E402  (after the path set-up above)

project = "poolgrad"
author = "the poolgrad developers"
copyright = "the poolgrad developers"
version = release = poolgrad.__version__

extensions = ["sphinx.ext.autodoc", "numpydoc"]

# Signatures keep their type hints; the numpydoc "Parameters" sections already explain each one in words.
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
# The exception classes carry no methods of their own worth a table (their one attribute is documented in the
# class docstring), and the autosummary tables numpydoc would add need stub pages this reference does not have.
numpydoc_show_class_members = False
numpydoc_show_inherited_class_members = False
numpydoc_class_members_toctree = False
# Docstrings say "array_like", "ndarray", "int, optional": plain text, no cross-reference targets to miss.
numpydoc_xref_param_type = False

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
html_title = f"poolgrad {release} API reference"
