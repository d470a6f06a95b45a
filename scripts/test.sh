#!/usr/bin/env bash
# Newcomer command 2 (and what CI runs): install what droce needs, build everything, and run
# the whole test suite: unit and golden tests, the deterministic lossy-network simulation, and
# the DPDK end-to-end tests (net_ring, net_null, memif between two processes, af_packet over
# veth in namespaces), then interop against Linux rxe in two qemu VMs (tests/interop/rxe.sh:
# about 10 minutes under emulation; it skips with one line where it cannot run, and
# DROCE_SKIP_INTEROP=1 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
# The zero-config links of the libraries keep one lock file per role in /tmp/droce-<uid>
# (flock, held for the life of the process, never removed by it); every test names its own
# link, so a run leaves ~200 of them. At the end, remove those this run created that no
# process holds (checked by taking the lock while removing).
STAMP=$(mktemp /tmp/droce-test-start.XXXXXX)
. scripts/bench-lib.sh
remove_stale_locks() {
  local d="/tmp/droce-$(id -u)"
  if [ -d "$d" ]; then
    mapfile -d '' made < <(find "$d" -maxdepth 1 -name '*.lock' -newer "$STAMP" -print0)
    remove_free_locks "${made[@]}"
  fi
  rm -f "$STAMP"
}
trap remove_stale_locks EXIT
cargo build --workspace --all-targets
# The fuzz targets and the interop probe live in their own workspaces (cargo-fuzz needs
# nightly to run the former; the latter is built by tests/interop/rxe.sh, which may skip):
# make sure both still compile against the transport's API.
(cd fuzz && cargo check --bins --quiet)
(cd tests/interop/probe && cargo check --quiet)
cargo test --workspace
if [ "${DROCE_SKIP_INTEROP:-0}" = 1 ]; then
  echo "rxe interop: left out (DROCE_SKIP_INTEROP=1)"
else
  tests/interop/rxe.sh
fi
