#!/usr/bin/env bash
# Build poolgrad in a variant configuration, in a scratch copy of the working tree, and run tests against it.
#
#   scripts/build_variant.sh asan      [pytest args...]   AddressSanitizer build, whole suite under ASan
#   scripts/build_variant.sh no-openmp [pytest args...]   build without OpenMP (serial kernels)
#   scripts/build_variant.sh native    [pytest args...]   -march=native build (opt-in, see README)
#
# The working tree's own build is left alone.  With no pytest args the whole suite runs.  The Python used
# ($PYTHON, default python3) needs the build requirements: pip install "Cython>=3.0" "setuptools>=77" numpy.
#
# ASan: the extensions are compiled with POOLGRAD_ASAN=1 (-fsanitize=address, see setup.py); CPython itself is
# not, so gcc's libasan is preloaded and leak detection is off (CPython's arenas would drown real reports).
# PyTorch and TensorFlow are hidden from the tests under ASan (POOLGRAD_TEST_NO_FRAMEWORKS=1): they are not
# ASan-clean, and the parity tests against them run in the ordinary suite.  Any ASan report aborts the
# process, so the run fails.
set -euo pipefail
mode="${1:?usage: build_variant.sh asan|no-openmp|native [pytest args...]}"
shift
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d /tmp/poolgrad-variant.XXXXXX)"
trap 'rm -rf "$work"' EXIT
git -C "$root" ls-files -co --exclude-standard -z | (cd "$root" && xargs -0 cp --parents -t "$work")
cd "$work"
case "$mode" in
  asan) export POOLGRAD_ASAN=1; check="asan_build" ;;
  no-openmp) export POOLGRAD_NO_OPENMP=1; check="serial" ;;
  native) export POOLGRAD_NATIVE=1; check="native_build" ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
"$python" setup.py build_ext --inplace -q -j 2 > build.log 2>&1 || { tail -30 build.log; exit 1; }
if [ "$mode" = asan ]; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so)"
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1"
  export POOLGRAD_TEST_NO_FRAMEWORKS=1
  echo "ASan runtime: $LD_PRELOAD"
fi
"$python" - "$check" <<'PY'
import sys, poolgrad
cfg = poolgrad.get_config()
want = sys.argv[1]
ok = (not cfg["openmp"]) if want == "serial" else cfg[want]
print("variant build:", {k: cfg[k] for k in ("openmp", "asan_build", "native_build")})
sys.exit(0 if ok else "the variant build does not report the requested configuration")
PY
"$python" -m pytest -p no:cacheprovider "$@"
