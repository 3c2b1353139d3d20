#!/bin/sh
# docs/models.md "Memory per rank": checkpoint skeletons (config.json + safetensors headers, the
# data a sparse hole) for V4-Flash (config verbatim from the spec) and V4-Pro (its key fields,
# Flash's other values), planned with `tilestack generate --dry-run`. No weights needed.
# usage: tests/gen/plan/make_table.sh [TILESTACK] [TMPDIR]
set -eu
ts=${1:-build/tilestack}
tmp=${2:-$(mktemp -d)}
mkdir -p "$tmp"
here=$(dirname "$0")
for m in flash pro; do
    rm -rf "$tmp/dsv4-$m"
    "$ts" export-hf --skeleton "$here/dsv4_${m}_config.json" --out "$tmp/dsv4-$m" >/dev/null
    for ctx in 4096 65536; do
        "$ts" generate --model "$tmp/dsv4-$m" --dry-run --batch 1 --context $ctx
    done
done
