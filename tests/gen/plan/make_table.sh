#!/bin/sh
# docs/models.md "Memory per rank": checkpoint skeletons (config.json + safetensors headers, the
# data a sparse hole) for V4-Flash (config verbatim from the spec), V4-Pro (its key fields,
# Flash's other values) and V3.2 (DeepSeek-V3.2's release config.json, the text
# tests/test_model_hf_v3.c model_hf_v32_config_release parses), planned with
# `tilestack generate --dry-run`. No weights needed.
# usage: tests/gen/plan/make_table.sh [TILESTACK] [TMPDIR]
set -eu
ts=${1:-build/tilestack}
tmp=${2:-$(mktemp -d)}
mkdir -p "$tmp"
here=$(dirname "$0")
for m in dsv4_flash dsv4_pro dsv32; do
    rm -rf "$tmp/$m"
    "$ts" export-hf --skeleton "$here/${m}_config.json" --out "$tmp/$m" >/dev/null
    for ctx in 4096 65536; do
        "$ts" generate --model "$tmp/$m" --dry-run --batch 1 --context $ctx
    done
done
