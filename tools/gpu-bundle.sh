#!/usr/bin/env bash
# Packs what a GPU machine without apt or internet lacks to build the kit (tools/gpu-check.sh):
# the header-only libraries (CLI11, nlohmann-json, toml++, fmt), Gloo's headers (c10d's
# ProcessGroupGloo.hpp includes them; no torch wheel ships them), GoogleTest's sources, and NVML's
# header where the machine's CUDA toolkit might lack it — copied from this machine's Debian
# packages (and the pip configuration's nvidia-nvml-dev) into an ignored folder.
#   tools/gpu-bundle.sh [DIR]     default: .gpu-bundle (in .gitignore); prints its size
# Run it where tools/setup-debian.sh has run. The folder is what `DDPLAB_DEPS_DIR` names.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/.gpu-bundle}
tmp="$OUT.tmp$$"
rm -rf "$tmp"
mkdir -p "$tmp/include"
manifest=$tmp/MANIFEST
echo "# tools/gpu-bundle.sh, $(date -u +%Y-%m-%dT%H:%MZ), from $(. /etc/os-release && echo "$PRETTY_NAME")" >"$manifest"
copy() {  # copy <package> <source> <dest under the bundle>
  local pkg=$1 src=$2 dest=$3
  if [ ! -e "$src" ]; then
    echo "gpu-bundle: $src is missing (Debian: apt-get install $pkg; tools/setup-debian.sh installs it)" >&2
    rm -rf "$tmp"
    exit 1
  fi
  mkdir -p "$(dirname "$tmp/$dest")"
  cp -rL "$src" "$tmp/$dest"
  echo "$dest  $pkg $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo '?')  ($src)" >>"$manifest"
}
copy libcli11-dev /usr/include/CLI include/CLI
copy nlohmann-json3-dev /usr/include/nlohmann include/nlohmann
copy libtomlplusplus-dev /usr/include/toml++ include/toml++
copy libfmt-dev /usr/include/fmt fmt/include/fmt  # apart: a torch that ships its own fmt must not see it
copy libgloo-dev /usr/include/gloo include/gloo
copy googletest /usr/src/googletest googletest
nvml=$(ls "$ROOT"/.venv/lib/python3*/site-packages/nvidia/cu*/include/nvml.h 2>/dev/null | head -1 || true)
if [ -n "$nvml" ]; then
  cp "$nvml" "$tmp/include/nvml.h"
  echo "include/nvml.h  nvidia-nvml-dev (pip, $nvml)" >>"$manifest"
else
  echo "gpu-bundle: no nvml.h in .venv (DDPLAB_TORCH=pip ./kit build installs nvidia-nvml-dev); the GPU machine's toolkit must have it" >&2
fi
rm -rf "$OUT"
mv "$tmp" "$OUT"
echo "gpu-bundle: $OUT, $(du -sh "$OUT" | cut -f1) ($(find "$OUT" -type f | wc -l) files):"
sed 's/^/  /' "$OUT/MANIFEST"
