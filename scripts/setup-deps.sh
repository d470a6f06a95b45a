#!/usr/bin/env bash
# Installs the Debian 12 packages droce builds and tests against. Idempotent: packages that are
# already installed are skipped, so a second run costs a dpkg query and nothing else.
set -euo pipefail

PKGS=(
  build-essential pkg-config     # cc crate, pkg-config lookup of libdpdk
  dpdk dpdk-dev libdpdk-dev      # DPDK 22.11 runtime, PMDs (memif, af_packet, ring, null, tap, pcap) and headers
  libclang-dev                   # bindgen for dpdk-sys
  iproute2                       # network namespaces and veth pairs in end-to-end tests
  iputils-ping                   # the non-RoCE flood (ping -f) in the af_packet end-to-end test
  libfabric-bin                  # fi_info, fi_pingpong: tests/fabric.rs and the tcp-provider baseline of scripts/bench-rdma.sh
  libfabric-dev                  # rdma/fabric.h etc.: fi-provider's bindgen; fabtests build against it
  openmpi-bin libopenmpi-dev     # mpirun.openmpi / mpicc.openmpi: tests/mpi.rs (mtl ofi over droce, pml ucx)
  mpich libmpich-dev             # mpiexec.mpich / mpicc.mpich (Debian's MPICH is ch4:ucx): tests/mpi.rs
  libucx-dev ucx-utils           # UCX 1.13 headers, ucx_info (config.h for ucx-glue), ucx_perftest
  tshark tcpdump                 # reading the pcaps droce writes, cross-checking droce-dump
  python3                        # transport/tests/vectors/icrc_check.py: the golden tests cross-check IPv6 ICRCs with it
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup-deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -q
  # tshark asks whether non-root users may capture; answer no without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# ucx-glue compiles against UCX's internal headers, which only the Debian source package has.
if [ -x "$(dirname "$0")/setup-ucx-src.sh" ]; then
  "$(dirname "$0")/setup-ucx-src.sh"
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup-deps: cargo not found; droce needs Rust >= 1.75 from rustup (Debian 12's rustc 1.63 is too old)" >&2
  exit 1
fi
