#!/usr/bin/env bash
# Installs everything ddplab needs on Debian 12 from Debian's archive, and makes LibTorch use an
# optimized BLAS. Idempotent: run it as often as you like. Needs root (or sudo).
#   tools/setup-debian.sh            install build + run dependencies
#   tools/setup-debian.sh --check    only report what is missing (exit 1 if anything is)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  clang                   # the default compiler: builds ddplab in about half GCC's time (docs/concepts/build.md)
  lld                     # the linker: links a LibTorch program ~5x faster than GNU ld (cmake/Flags.cmake)
  libtorch-dev            # LibTorch 1.13 C++ frontend and c10d (CPU)
  libgloo-dev             # Gloo headers that match Debian's LibTorch (c10d's CPU backend)
  libopenblas0-openmp     # optimized BLAS; the OpenMP build obeys torch::set_num_threads
  libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libfmt-dev
  zlib1g-dev              # reads gzip-compressed click logs (ddplab data import criteo)
  libgtest-dev libgmock-dev libbenchmark-dev
  doxygen clang-format   # API reference; the style check (.clang-format)
  openmpi-bin             # mpirun, to show that labs run under other launchers
  libopenmpi-dev          # MPI headers: the mpi backend (--backend mpi, shared memory between ranks)
  unzip zip               # the grader unpacks zipped submissions; its self-tests zip one
  bubblewrap              # bwrap: the grader's sandbox for student programs (--sandbox)
  iproute2                # ip netns: the two-node test's two network stacks (ddp.two_nodes_netns)
  python3-torch           # torchrun (PyTorch 1.13), the third launcher the labs are tested under
  chromium                # headless, renders the grader's report.html in a test (report_render_tests)
)
ARCH_DIR=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
OPENBLAS_BLAS=$ARCH_DIR/openblas-openmp/libblas.so.3
OPENBLAS_LAPACK=$ARCH_DIR/openblas-openmp/liblapack.so.3

# The package names and versions are Debian 12's: on another system stop with a message rather
# than half-install (DDPLAB_ANY_DISTRO=1 tries anyway).
os_id=$(. /etc/os-release 2>/dev/null && echo "${ID:-}:${VERSION_ID:-}:${PRETTY_NAME:-unknown}")
if [ "${os_id%%:*}" != debian ] || [ "$(cut -d: -f2 <<<"$os_id")" != 12 ]; then
  if [ "${DDPLAB_ANY_DISTRO:-0}" != 1 ]; then
    echo "ddplab set-up: this is $(cut -d: -f3- <<<"$os_id"), not Debian 12; the kit is built and tested against" \
      "Debian 12's packages (LibTorch 1.13 with Gloo, OpenBLAS). DDPLAB_ANY_DISTRO=1 tries anyway." >&2
    exit 1
  fi
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

blas_target() { readlink -f "$ARCH_DIR/libblas.so.3" 2>/dev/null || true; }

if [ "${1:-}" = "--check" ]; then
  status=0
  if [ ${#missing[@]} -gt 0 ]; then echo "missing packages: ${missing[*]}"; status=1; fi
  if [ "$(blas_target)" != "$(readlink -f "$OPENBLAS_BLAS" 2>/dev/null)" ]; then
    echo "libblas.so.3 points to $(blas_target), not OpenBLAS (OpenMP build)"; status=1
  fi
  [ $status -eq 0 ] && echo "ddplab set-up: complete"
  exit $status
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "ddplab set-up: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
else
  echo "ddplab set-up: all packages present"
fi

# Debian's libtorch links libblas.so.3, which is whatever the alternatives system selects. Pick
# OpenBLAS's OpenMP build explicitly: the reference BLAS is ~20x slower, and the pthread build
# ignores torch::set_num_threads (N ranks would then fight over the cores).
for name in libblas.so.3 liblapack.so.3; do
  alt="$name-$(basename "$ARCH_DIR")"
  want=$OPENBLAS_BLAS
  [ "$name" = liblapack.so.3 ] && want=$OPENBLAS_LAPACK
  if [ "$(readlink -f "$ARCH_DIR/$name")" != "$(readlink -f "$want")" ]; then
    $SUDO update-alternatives --set "$alt" "$want"
  fi
done
echo "ddplab set-up: libblas.so.3 -> $(blas_target)"
