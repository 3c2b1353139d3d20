#!/usr/bin/env bash
# Installs the Debian packages tilestack needs to build (the compiler, cmake, libonig-dev and
# libjansson-dev for the tokenizer) when run as root, or prints the
# exact apt-get line to run. Optional packages (OpenBLAS and oneDNN for the bench baselines,
# Open MPI for the multi-rank modules, libmicrohttpd for `tilestack serve`) are installed when
# possible but never required.
set -euo pipefail

required=(gcc make cmake)
optional_pkgs=(libopenblas-dev libdnnl-dev openmpi-bin libopenmpi-dev libmicrohttpd-dev)

missing_pkgs=()
command -v gcc >/dev/null 2>&1 || missing_pkgs+=(build-essential)
command -v make >/dev/null 2>&1 || missing_pkgs+=(make)
if ! command -v cmake >/dev/null 2>&1; then
  missing_pkgs+=(cmake)
else
  ver=$(cmake --version | head -n1 | awk '{print $3}')
  if [ "$(printf '%s\n3.20\n' "$ver" | sort -V | head -n1)" != "3.20" ]; then
    echo "tilestack: cmake $ver is older than 3.20" >&2
    missing_pkgs+=(cmake)
  fi
fi
# the tokenizer's regex engine and JSON reader (src/text/)
for p in libonig-dev libjansson-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || missing_pkgs+=("$p")
done
missing_opt=()
for p in "${optional_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing_opt+=("$p")
done

[ ${#missing_pkgs[@]} -eq 0 ] && [ ${#missing_opt[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  echo "tilestack: installing ${missing_pkgs[*]} ${missing_opt[*]}"
  apt-get update -qq
  if [ ${#missing_pkgs[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}"
  fi
  if [ ${#missing_opt[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends "${missing_opt[@]}" ||
      echo "tilestack: optional packages ${missing_opt[*]} not installed (baselines skipped)"
  fi
  exit 0
fi

if [ ${#missing_pkgs[@]} -gt 0 ]; then
  echo "tilestack: missing build packages (${missing_pkgs[*]}: the compiler, cmake, and Oniguruma / jansson for the tokenizer). Run as root:" >&2
  echo "  apt-get update && apt-get install -y ${missing_pkgs[*]} ${missing_opt[*]}" >&2
  exit 1
fi
echo "tilestack: optional: apt-get install -y ${missing_opt[*]} (bench baselines, EP module)" >&2
exit 0
