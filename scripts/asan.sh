#!/usr/bin/env bash
# Build poolgrad with AddressSanitizer in a scratch copy of the working tree and run the test-suite under it.
#
#   scripts/asan.sh [pytest args...]          e.g. scripts/asan.sh -x -q
#
# The extensions are compiled with POOLGRAD_ASAN=1 (-fsanitize=address, see setup.py); CPython itself is not,
# so gcc's libasan is preloaded and leak detection is off (CPython's arenas would drown real reports).  PyTorch
# and TensorFlow are hidden from the tests under ASan (POOLGRAD_TEST_NO_FRAMEWORKS=1): their own allocators and
# JITs are not ASan-clean, and the parity tests against them run in the ordinary suite.  Any ASan report makes
# the run fail (ASan aborts the process with a non-zero exit).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d /tmp/poolgrad-asan.XXXXXX)"
trap 'rm -rf "$work"' EXIT
git -C "$root" ls-files -co --exclude-standard -z | (cd "$root" && xargs -0 cp --parents -t "$work")
cd "$work"
POOLGRAD_ASAN=1 "$python" setup.py build_ext --inplace -q 2>&1 | grep -v "^warning" | tail -3 || true
libasan="$(gcc -print-file-name=libasan.so)"
echo "ASan runtime: $libasan"
export LD_PRELOAD="$libasan"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1"
export POOLGRAD_TEST_NO_FRAMEWORKS=1
"$python" -c "import poolgrad; assert poolgrad.get_config()['asan_build'], 'not an ASan build'; print('ASan build ok')"
"$python" -m pytest -p no:cacheprovider "$@"
