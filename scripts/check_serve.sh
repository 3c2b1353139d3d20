#!/usr/bin/env bash
# `tilestack serve` (docs/serve.md) from the first given build directory that has the CLI:
# tests/serve/test_serve.py with pytest and the `openai` client, in a virtual environment from
# PyPI made once under that build directory (TS_SERVE_VENV=DIR uses an existing one). Without
# the CLI, libmicrohttpd, python3-venv or PyPI the check is skipped with a message, except
# under CI (CI=true), where that fails. Ends with "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=
for dir in "$@"; do
  [ -x "$dir/tilestack" ] && { bin=$(cd "$dir" && pwd)/tilestack; build=$(cd "$dir" && pwd); break; }
done
skip() {
  if [ "${CI:-}" = true ]; then echo "serve checks: $1 (required under CI)"; echo "0 passed, 1 failed"; exit 1; fi
  echo "serve checks: skipped: $1"
  echo "0 passed, 0 failed"
  exit 0
}
[ -n "$bin" ] || skip "no tilestack CLI in $*"
"$bin" serve --help >/dev/null 2>&1 || skip "this build has no HTTP server (apt-get install libmicrohttpd-dev)"
command -v curl >/dev/null 2>&1 || skip "curl not found"
echo "=== serve checks: $bin ==="
venv=${TS_SERVE_VENV:-$build/py-serve}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import openai, pytest" 2>/dev/null; then
  [ -n "${TS_SERVE_VENV:-}" ] && skip "TS_SERVE_VENV=$venv lacks openai / pytest"
  rm -rf "$venv"
  python3 -m venv "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed (apt-get install python3-venv)"
  "$venv/bin/pip" install -q --disable-pip-version-check openai==3.60.0 pytest==9.2.0 \
    >"$venv.log" 2>&1 || { tail -n 5 "$venv.log"; skip "pip could not install openai / pytest"; }
fi
log=$(mktemp)
TS_SERVE_BIN="$bin" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here/tests/serve" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
p=$(grep -Eo '[0-9]+ passed' "$log" | tail -n1 | cut -d' ' -f1)
f=$(grep -Eo '[0-9]+ (failed|error)' "$log" | awk '{s += $1} END {print s + 0}')
rm -f "$log"
echo "${p:-0} passed, ${f:-0} failed"
exit "$rc"
