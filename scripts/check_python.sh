#!/usr/bin/env bash
# The Python packages (python/: deep_gemm, deep_select, flash_mla, deep_ep, tile_kernels) built
# against the first given build directory's libtilestack.a and tested with pytest (python/tests).
# The virtual environment (torch CPU use, numpy, pytest, scikit-build-core, mpi4py from PyPI) lives under
# that build directory and is made once; TS_PYTHON_VENV=DIR uses an existing one instead.
# Without python3-venv or PyPI the check is skipped with a message, except under CI (CI=true)
# or with TS_REQUIRE_PYTHON=1 (.ci/run), where that fails. Ends with "N passed, N failed".
# The first venv takes minutes: the default PyPI torch wheel pulls ~3 GB of CUDA libraries
# (it runs on CPU); measured 4 min 24 s on a loaded 2-vCPU VM.
# TS_PYTHON_ASAN=1 tests an AddressSanitizer build of the extension instead (docs/python.md).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=
for dir in "$@"; do
  [ -f "$dir/libtilestack.a" ] && { build=$(cd "$dir" && pwd); break; }
done
skip() {
  if [ "${CI:-}" = true ] || [ "${TS_REQUIRE_PYTHON:-}" = 1 ]; then echo "python packages: $1 (required under CI)"; echo "0 passed, 1 failed"; exit 1; fi
  echo "python packages: skipped: $1"
  echo "0 passed, 0 failed"
  exit 0
}
[ -n "$build" ] || skip "no libtilestack.a in $*"
echo "=== python packages: against $build ==="
venv=${TS_PYTHON_VENV:-$build/py-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, numpy, pytest, scikit_build_core" 2>/dev/null; then
  [ -n "${TS_PYTHON_VENV:-}" ] && skip "TS_PYTHON_VENV=$venv lacks torch / numpy / pytest / scikit-build-core"
  command -v python3 >/dev/null 2>&1 || skip "python3 not found"
  rm -rf "$venv"
  python3 -m venv "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed (apt-get install python3-venv)"
  start=$(date +%s)
  "$venv/bin/pip" install -q --disable-pip-version-check torch==2.15.0 numpy==2.4.6 pytest==9.2.0 scikit-build-core==1.1.2 mpi4py==4.1.2 \
    >"$venv.log" 2>&1 || { tail -n 5 "$venv.log"; skip "pip could not install torch / numpy / pytest"; }
  echo "python packages: venv made in $(( $(date +%s) - start )) s"
fi
# deep_ep's multi-rank tests need mpi4py; a venv made before it was pinned gets it here.
[ -z "${TS_PYTHON_VENV:-}" ] && ! "$venv/bin/python" -c "import mpi4py" 2>/dev/null &&
  "$venv/bin/pip" install -q --disable-pip-version-check mpi4py==4.1.2 >>"$venv.log" 2>&1
# Reuse the finished build's static library: the extension alone is compiled here.
run=(env)
if [ "${TS_PYTHON_ASAN:-}" = 1 ]; then
  # Opt-in: the extension compiled with AddressSanitizer (the library stays the build's own),
  # installed into $build/py-asan-site rather than the venv, the interpreter run with libasan
  # preloaded (python itself is not instrumented) and leak checks off (torch and CPython keep
  # memory at exit). libstdc++ is preloaded with it: ASan resolves the real __cxa_throw when it
  # starts, and without libstdc++ loaded by then, the first C++ exception torch throws (a
  # DLPack export of a non-CPU tensor) aborts in ASan's interceptor. The mpirun workers inherit
  # the environment.
  asan=$(${CC:-cc} -print-file-name=libasan.so)
  stdcxx=$(${CC:-cc} -print-file-name=libstdc++.so.6)
  [ -f "$asan" ] || { echo "python packages: TS_PYTHON_ASAN=1: no libasan.so for ${CC:-cc}"; echo "0 passed, 1 failed"; exit 1; }
  "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps --upgrade \
    --target "$build/py-asan-site" "$here/python" -Ccmake.define.TILESTACK_BUILD_DIR="$build" \
    -Cbuild-dir="$build/py-asan-build" "-Ccmake.define.CMAKE_C_FLAGS=-fsanitize=address -fno-omit-frame-pointer -g" \
    -Ccmake.define.CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address \
    >"$build/py-install.log" 2>&1 || { tail -n 20 "$build/py-install.log"; echo "0 passed, 1 failed"; exit 1; }
  run=(env PYTHONPATH="$build/py-asan-site" LD_PRELOAD="$asan $stdcxx" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
  echo "python packages: AddressSanitizer extension ($build/py-asan-site, LD_PRELOAD=$asan $stdcxx)"
else
  "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps \
    "$here/python" -Ccmake.define.TILESTACK_BUILD_DIR="$build" -Cbuild-dir="$build/py-build" \
    >"$build/py-install.log" 2>&1 || { tail -n 20 "$build/py-install.log"; echo "0 passed, 1 failed"; exit 1; }
fi
log=$(mktemp)
# From outside python/, so the tests import the installed packages, not the source tree.
(cd "$build" && "${run[@]}" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here/python/tests") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
p=$(grep -Eo '[0-9]+ passed' "$log" | tail -n1 | cut -d' ' -f1)
f=$(grep -Eo '[0-9]+ (failed|error)' "$log" | awk '{s += $1} END {print s + 0}')
rm -f "$log"
echo "${p:-0} passed, ${f:-0} failed"
exit "$rc"
