"""Build script for poolgrad's compiled core.

Every ``poolgrad/_*.pyx.in`` Tempita template is expanded to ``poolgrad/_*.pyx`` (one kernel body stamped out per
storage dtype and index dtype), then every ``poolgrad/_*.pyx`` is cythonized into its own extension module.
Template expansion, the compiler probe and cythonization happen when ``build_ext`` runs, not when this file is
imported, so ``python -m build --sdist`` neither compiles anything nor ships generated files: an sdist carries the
templates and this script regenerates the ``.pyx`` files.  The build stops with an error naming what is missing
when a kernel source or a header is absent, and naming the module when one does not compile.

Environment switches (read at build time, reported by ``poolgrad.show_config()``):

``POOLGRAD_NATIVE=1``   add ``-march=native`` (off by default: a wheel must run on any x86-64 / aarch64 CPU).
``POOLGRAD_ASAN=1``     build with AddressSanitizer (``-fsanitize=address -fno-omit-frame-pointer -O1``).
``POOLGRAD_NO_OPENMP=1`` build without OpenMP even when the compiler has it (kernels then run serially).
``POOLGRAD_ONLY=_a,_b``  development: expand/compile only these modules (e.g. ``_avg_pool``), for quick rebuilds.
``POOLGRAD_BUILD_JOBS=n`` cythonize with ``n`` processes and compile ``n`` modules at once (default: one
                          cythonize process, as many compiler processes as CPUs).
"""
from __future__ import annotations

import ast
import glob
import json
import os
import re
import sys
import tempfile
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "poolgrad")
# Folders searched for the headers the kernels include: the private C sources and the public header folder.
HEADER_DIRS = [os.path.join(HERE, "src_c"), os.path.join(PKG, "include")]

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

GENERATED_HEADER = "# Generated from {} by setup.py; edit the template, not this file.\n"


class BuildError(SystemExit):
    """A build that cannot produce a complete package: the message says what is missing or failed."""

    def __init__(self, message: str) -> None:
        super().__init__(f"poolgrad build error: {message}")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _selected(path: str) -> bool:
    only = [m.strip() for m in os.environ.get("POOLGRAD_ONLY", "").split(",") if m.strip()]
    return not only or os.path.basename(path).split(".")[0] in only


def _rel(path: str) -> str:
    return os.path.relpath(path, HERE).replace(os.sep, "/")


# ---------------------------------------------------------------------------------------------------------------
# Which extension modules exist, and are all their sources here?
# ---------------------------------------------------------------------------------------------------------------

def _kernel_sources() -> dict[str, str]:
    """Map each extension module name (``_avg_pool``) to its source: the template when there is one (the
    ``.pyx`` beside it is generated from it), else a hand-written ``.pyx``."""
    sources = {}
    for template in sorted(glob.glob(os.path.join(PKG, "_*.pyx.in"))):
        sources[os.path.basename(template)[:-len(".pyx.in")]] = template
    for pyx in sorted(glob.glob(os.path.join(PKG, "_*.pyx"))):
        sources.setdefault(os.path.basename(pyx)[:-len(".pyx")], pyx)
    return sources


def _python_module_exists(name: str) -> bool:
    return os.path.exists(os.path.join(PKG, name + ".py")) or os.path.isdir(os.path.join(PKG, name))


def _compiled_modules_imported() -> dict[str, str]:
    """Every ``poolgrad._name`` that the package's Python code imports and that is not a Python module, with the
    first file importing it: these must be built from a kernel source, or the package cannot be imported."""
    wanted: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(PKG, "**", "*.py"), recursive=True)):
        package = ["poolgrad"] + os.path.relpath(os.path.dirname(path), PKG).replace(os.sep, "/").split("/")
        package = [p for p in package if p not in ("", ".")]
        with open(path, encoding="utf-8") as fh:
            try:
                tree = ast.parse(fh.read(), path)
            except SyntaxError as exc:
                raise BuildError(f"cannot parse {_rel(path)}: {exc}") from exc
        for node in ast.walk(tree):
            names: list[list[str]] = []
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                target = base + (node.module.split(".") if node.module else [])
                names = [target] + [target + [alias.name] for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name.split(".") for alias in node.names]
            for parts in names:
                if len(parts) >= 2 and parts[0] == "poolgrad" and parts[1].startswith("_") \
                        and not parts[1].startswith("__") and not _python_module_exists(parts[1]):
                    wanted.setdefault(parts[1], _rel(path))
    return wanted


def _quoted_includes(path: str) -> set[str]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return set(re.findall(r'#\s*include\s+"([^"]+)"', text)) | set(re.findall(r'cdef\s+extern\s+from\s+"([^"]+)"',
                                                                          text))


def _check_sources(sources: dict[str, str]) -> None:
    """Fail, naming the files, when a compiled module the package imports has no kernel source, or a header
    that a kernel source or header includes is in none of the include folders."""
    if not sources:
        raise BuildError(f"no kernel sources (poolgrad/_*.pyx.in templates or poolgrad/_*.pyx) under {HERE}; "
                         "an sdist or checkout without them cannot build the compiled core")
    missing = [f"poolgrad.{name} (imported by {where}): neither poolgrad/{name}.pyx.in nor poolgrad/{name}.pyx"
               for name, where in sorted(_compiled_modules_imported().items()) if name not in sources]
    if missing:
        raise BuildError("kernel sources missing for compiled modules the package imports:\n  "
                         + "\n  ".join(missing))
    files = list(sources.values()) + glob.glob(os.path.join(PKG, "*.pxd"))
    for folder in HEADER_DIRS:
        files += glob.glob(os.path.join(folder, "*.h")) + glob.glob(os.path.join(folder, "*.c"))
    absent = []
    for path in sorted(files):
        for header in sorted(_quoted_includes(path)):
            # numpy/... and Python's own headers come from their include folders, not from this tree.
            if "/" in header or header.startswith("Python") or header.startswith("numpy"):
                continue
            here = [os.path.dirname(path)] + HEADER_DIRS
            if not any(os.path.exists(os.path.join(d, header)) for d in here):
                absent.append(f"{header} (included by {_rel(path)})")
    if absent:
        raise BuildError("headers missing from src_c/ and poolgrad/include/:\n  " + "\n  ".join(absent))


def _expand_templates(sources: dict[str, str]) -> None:
    # Cython is imported only where it is used, so that the source checks and the sdist need only setuptools.
    from Cython import Tempita

    for name, source in sources.items():
        if not source.endswith(".pyx.in") or not _selected(source):
            continue
        target = source[:-3]
        with open(source, encoding="utf-8") as fh:
            # DTYPE_NAMES: the dtype suffixes in DTYPES order, i.e. the integer code of each dtype is its position
            # (the dispatchers' ``DTYPE_NAMES.index(dt)``), written down once here.
            text = Tempita.sub(fh.read(), DTYPES=DTYPES, ITYPES=ITYPES, COMBOS=COMBOS,
                               DTYPE_NAMES=tuple(d[0] for d in DTYPES))
        text = GENERATED_HEADER.format(os.path.basename(source)) + text
        old = None
        if os.path.exists(target):
            with open(target, encoding="utf-8") as fh:
                old = fh.read()
        if old != text:     # rewriting an unchanged file would make cythonize redo it
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(text)


def _extensions(sources: dict[str, str]) -> list[Extension]:
    """One extension per kernel source; its ``.pyx`` may not exist yet (templates are expanded by build_ext)."""
    depends = sorted(_rel(p) for d in HEADER_DIRS for p in glob.glob(os.path.join(d, "*.h")))
    depends += sorted(_rel(p) for p in glob.glob(os.path.join(PKG, "*.pxd")))
    return [Extension("poolgrad." + name, [_rel(os.path.join(PKG, name + ".pyx"))],
                      include_dirs=[_rel(d) for d in HEADER_DIRS],
                      depends=depends,
                      define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
            for name, source in sorted(sources.items()) if _selected(source)]


# ---------------------------------------------------------------------------------------------------------------
# Compiler flags: GCC / Clang on Linux and macOS, MSVC on Windows.
# ---------------------------------------------------------------------------------------------------------------

_OMP_PROBE = "#include <omp.h>\nint main(void){int n=0;\n#pragma omp parallel reduction(+:n)\nn+=1;\nreturn n>0?0:1;}\n"


def _compiler_accepts(compiler: Any, compile_args: list[str], link_args: list[str]) -> bool:
    """Compile and link a tiny OpenMP program with the compiler setuptools will use for the extensions."""
    with tempfile.TemporaryDirectory() as tmp:
        c_file = os.path.join(tmp, "omp_probe.c")
        with open(c_file, "w") as fh:
            fh.write(_OMP_PROBE)
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(2)
        try:
            os.dup2(devnull, 2)     # a failed probe is expected on compilers without OpenMP: keep its noise out
            objects = compiler.compile([c_file], output_dir=tmp, extra_postargs=compile_args)
            compiler.link_executable(objects, "omp_probe", output_dir=tmp, extra_postargs=link_args)
        except Exception:   # distutils raises CompileError/LinkError; a missing compiler raises others
            return False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
        return True


def _build_flags(compiler: Any) -> tuple[list[str], list[str], dict[str, Any]]:
    msvc = getattr(compiler, "compiler_type", "") == "msvc"
    if msvc:
        # C11 mode for `restrict`; MSVC's /openmp is OpenMP 2.0 (signed loop counters, which Cython emits) and
        # links vcomp140.dll from the Visual C++ runtime.  Untested here: see README "Releasing".
        compile_args = ["/O2", "/std:c11"]
        omp_flags: tuple[list[str], list[str]] = (["/openmp"], [])
    else:
        compile_args = ["-O3", "-fno-strict-aliasing", "-fno-math-errno", "-Wno-unused-function",
                        "-Wno-unreachable-code", "-Wno-maybe-uninitialized"]
        omp_flags = (["-fopenmp"], ["-fopenmp"])
    link_args: list[str] = []
    openmp = False
    if not _env_flag("POOLGRAD_NO_OPENMP") and _compiler_accepts(compiler, compile_args + omp_flags[0],
                                                                 omp_flags[1]):
        compile_args += omp_flags[0]
        link_args += omp_flags[1]
        openmp = True
    native = _env_flag("POOLGRAD_NATIVE")
    if native:
        compile_args.append("/arch:AVX2" if msvc else "-march=native")
    asan = _env_flag("POOLGRAD_ASAN")
    if asan:
        if msvc:
            compile_args.append("/fsanitize=address")
        else:
            compile_args = [a for a in compile_args if a != "-O3"] + ["-O1", "-g", "-fsanitize=address",
                                                                       "-fno-omit-frame-pointer"]
            link_args.append("-fsanitize=address")
    config = {"openmp": openmp, "native": native, "asan": asan,
              "compile_args": compile_args, "link_args": link_args}
    return compile_args, link_args, config


class BuildExt(build_ext):
    """Expands the templates, picks the flags for the compiler in use, cythonizes, then compiles; a failure
    names the module."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None and os.environ.get("POOLGRAD_BUILD_JOBS", "").strip():
            self.parallel = int(os.environ["POOLGRAD_BUILD_JOBS"])
        elif self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def build_extensions(self) -> None:
        import numpy as np
        from Cython.Build import cythonize

        sources = _kernel_sources()
        _check_sources(sources)
        compile_args, link_args, config = _build_flags(self.compiler)
        # Every module the package is built with, for the import check in poolgrad/__init__.py.
        config["extensions"] = sorted(sources)
        self._write_config(config)
        _expand_templates(sources)
        jobs = int(os.environ.get("POOLGRAD_BUILD_JOBS", "0") or 0)
        for ext in self.extensions:
            ext.include_dirs.append(np.get_include())
            ext.extra_compile_args = list(compile_args)
            ext.extra_link_args = list(link_args)
        try:
            # include/ on Cython's path too: _capi cimports the public declarations of poolgrad_capi.pxd
            generated = cythonize(list(self.extensions), language_level=3, nthreads=jobs or None,
                                  include_path=[os.path.join(PKG, "include")],
                                  compiler_directives={"boundscheck": False, "wraparound": False,
                                                       "cdivision": True, "initializedcheck": False,
                                                       "embedsignature": True})
        except Exception as exc:
            raise BuildError(f"Cython could not translate {exc} (Cython's messages above name the line)") from exc
        # cythonize returns fresh Extension objects; setuptools has already annotated ours (full names, output
        # paths), so only the generated C sources are taken over.
        by_name = {ext.name: ext for ext in generated}
        for ext in self.extensions:
            ext.sources = list(by_name[ext.name].sources)
        super().build_extensions()

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            raise BuildError(f"could not compile {ext.name} from {', '.join(ext.sources)} (compiler output "
                             f"above): {exc}") from exc

    def _write_config(self, config: dict[str, Any]) -> None:
        """``_build_config.json`` (read by ``poolgrad.get_config()`` and the import check) goes beside the
        sources, for in-place and editable builds, and into the build folder a wheel is made from (build_py runs
        before this command, so package data cannot carry it)."""
        text = json.dumps(config, indent=1)
        for folder in (PKG, os.path.join(self.build_lib, "poolgrad")):
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "_build_config.json"), "w") as fh:
                fh.write(text)


class Sdist(sdist):
    """Leaves generated files out of the sdist (``.pyx`` files expanded from a template beside them, Cython's C
    output, the build record: every build regenerates them) and refuses to write an sdist that lacks a kernel
    source or header."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        # setuptools takes the file list from egg_info's manifest, so the list is filtered here, where it is used.
        generated = {_rel(p[:-3]) for p in glob.glob(os.path.join(PKG, "_*.pyx.in"))}
        generated |= {_rel(p[:-len(".pyx.in")] + ".c") for p in glob.glob(os.path.join(PKG, "_*.pyx.in"))}
        generated |= {_rel(p[:-len(".pyx")] + ".c") for p in glob.glob(os.path.join(PKG, "_*.pyx"))}
        generated.add("poolgrad/_build_config.json")
        files = [f for f in files if f.replace(os.sep, "/") not in generated]
        # Check the result, not the intent: an sdist from which the kernels cannot be built is an error here, not
        # in a packager's build later.
        shipped = {f.replace(os.sep, "/") for f in files}
        need = sorted(_rel(p) for p in _kernel_sources().values())
        need += sorted(_rel(p) for d in HEADER_DIRS for p in glob.glob(os.path.join(d, "*.h")))
        lost = [f for f in need if f not in shipped]
        if lost:
            raise BuildError("the sdist would lack build sources (fix MANIFEST.in): " + ", ".join(lost))
        super().make_release_tree(base_dir, files)


_SOURCES = _kernel_sources()
if "clean" not in sys.argv[1:]:
    _check_sources(_SOURCES)

setup(ext_modules=_extensions(_SOURCES), cmdclass={"build_ext": BuildExt, "sdist": Sdist})
