#!/usr/bin/env bash
# Newcomer command 1: install what droce needs, build it, and run droce-pmd on its embedded
# default configuration (virtual PMDs, no hugepages, no NIC); the run ends by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --bin droce-pmd
exec ./target/release/droce-pmd "$@"
