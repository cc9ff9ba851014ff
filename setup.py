"""Build script for poolgrad's compiled core.

Every ``poolgrad/_*.pyx.in`` Tempita template is expanded to ``poolgrad/_*.pyx`` (one kernel body stamped out per
storage dtype and index dtype), then every ``poolgrad/_*.pyx`` is cythonized into its own extension module.

Environment switches (read at build time, reported by ``poolgrad.show_config()``):

``POOLGRAD_NATIVE=1``   add ``-march=native`` (off by default: a wheel must run on any x86-64 / aarch64 CPU).
``POOLGRAD_ASAN=1``     build with AddressSanitizer (``-fsanitize=address -fno-omit-frame-pointer -O1``).
``POOLGRAD_NO_OPENMP=1`` build without OpenMP even when the compiler has it (kernels then run serially).
``POOLGRAD_ONLY=_a,_b``  development: expand/compile only these modules (e.g. ``_avg_pool``), for quick rebuilds.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from Cython import Tempita
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))

# The storage dtypes every kernel template is stamped out for: (suffix, C storage type, accumulator type).
# 16-bit floats travel as raw bits (uint16_t) and accumulate in float32; see src_c/pg_dtype.h.
DTYPES = [
    ("f32", "float", "float"),
    ("f64", "double", "double"),
    ("f16", "uint16_t", "float"),
    ("bf16", "uint16_t", "float"),
]
# Index dtypes for the operators that take or produce argmax indices: (suffix, C type).
ITYPES = [("i32", "int32_t"), ("i64", "int64_t")]
# Every (dtype, index dtype) pair with the integer code the generated dispatchers switch on:
# code = 2 * position in DTYPES + position in ITYPES (see ``_codes`` in the templates).
COMBOS = [(2 * k + j, dt, ct, acc, it, ict)
          for k, (dt, ct, acc) in enumerate(DTYPES) for j, (it, ict) in enumerate(ITYPES)]


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _compiler_accepts(flags: list[str]) -> bool:
    """Try to compile and link a tiny OpenMP program with ``flags``."""
    cc = os.environ.get("CC", "cc")
    src = "#include <omp.h>\nint main(void){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;\nreturn n>0?0:1;}\n"
    with tempfile.TemporaryDirectory() as tmp:
        c_file = os.path.join(tmp, "t.c")
        with open(c_file, "w") as fh:
            fh.write(src)
        try:
            res = subprocess.run([cc, c_file, "-o", os.path.join(tmp, "t"), *flags],
                                 capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        return res.returncode == 0


def _build_flags() -> tuple[list[str], list[str], dict]:
    compile_args = ["-O3", "-fno-strict-aliasing", "-fno-math-errno", "-Wno-unused-function",
                    "-Wno-unreachable-code", "-Wno-maybe-uninitialized"]
    link_args: list[str] = []
    openmp = False
    if not _env_flag("POOLGRAD_NO_OPENMP") and _compiler_accepts(["-fopenmp"]):
        compile_args.append("-fopenmp")
        link_args.append("-fopenmp")
        openmp = True
    native = _env_flag("POOLGRAD_NATIVE")
    if native:
        compile_args.append("-march=native")
    asan = _env_flag("POOLGRAD_ASAN")
    if asan:
        compile_args = [a for a in compile_args if a != "-O3"] + ["-O1", "-g", "-fsanitize=address",
                                                                   "-fno-omit-frame-pointer"]
        link_args.append("-fsanitize=address")
    config = {"openmp": openmp, "native": native, "asan": asan,
              "compile_args": compile_args, "link_args": link_args}
    return compile_args, link_args, config


def _selected(path: str) -> bool:
    only = [m.strip() for m in os.environ.get("POOLGRAD_ONLY", "").split(",") if m.strip()]
    return not only or os.path.basename(path).split(".")[0] in only


def _expand_templates() -> None:
    for template in sorted(glob.glob(os.path.join(HERE, "poolgrad", "_*.pyx.in"))):
        if not _selected(template):
            continue
        target = template[:-3]
        with open(template) as fh:
            text = Tempita.sub(fh.read(), DTYPES=DTYPES, ITYPES=ITYPES, COMBOS=COMBOS)
        header = f"# Generated from {os.path.basename(template)} by setup.py; edit the template, not this file.\n"
        text = header + text
        if not os.path.exists(target) or open(target).read() != text:
            with open(target, "w") as fh:
                fh.write(text)


def _extensions() -> list[Extension]:
    compile_args, link_args, config = _build_flags()
    with open(os.path.join(HERE, "poolgrad", "_build_config.json"), "w") as fh:
        json.dump(config, fh, indent=1)
    _expand_templates()
    exts = []
    for pyx in sorted(glob.glob(os.path.join(HERE, "poolgrad", "_*.pyx"))):
        if not _selected(pyx):
            continue
        name = "poolgrad." + os.path.basename(pyx)[:-4]
        exts.append(Extension(
            name, [os.path.relpath(pyx, HERE)],
            include_dirs=[os.path.join(HERE, "src_c"), os.path.join(HERE, "poolgrad", "include"), np.get_include()],
            depends=sorted(glob.glob(os.path.join("src_c", "*.h"))) + [os.path.join("poolgrad", "_common.pxd")],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=compile_args, extra_link_args=link_args))
    return cythonize(exts, language_level=3, nthreads=int(os.environ.get("POOLGRAD_BUILD_JOBS", "0")) or None,
                     compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True,
                                          "initializedcheck": False, "embedsignature": True})


setup(ext_modules=_extensions(),
      package_data={"poolgrad": ["_build_config.json", "py.typed", "include/*.h", "include/*.pxd"]})
