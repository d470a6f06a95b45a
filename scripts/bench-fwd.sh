#!/usr/bin/env bash
# Benchmark (not a test): droce-pmd vs dpdk-testpmd, txonly -> rxonly over memif between two
# processes, measured in the same run at 64 B and 1500 B.
#
# Layout (identical for both tools): the receiver (memif server, rxonly) is pinned to CPU 0 and
# the sender (memif client, txonly) to CPU 1. Each process has two EAL lcores on its one CPU
# (--lcores=0@C,1@C): lcore 0 is the main lcore (asleep between stats prints), lcore 1 polls.
# testpmd needs a forwarding lcore distinct from its main lcore, so droce-pmd is given the same.
#
# Receiver-side packets per second: the mean of the receiver's "Rx-pps" lines (one per second,
# --stats-period 1) over a fixed window of WINDOW seconds that starts WARMUP seconds after the
# first non-zero sample.
#
# Usage: scripts/bench-fwd.sh [sizes...]        (default: 64 1500)
# Env:   DROCE_PMD=path (default: target/release/droce-pmd, built if missing),
#        TESTPMD=path (default: /usr/bin/dpdk-testpmd), WINDOW=5, WARMUP=2, ROUNDS=1.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=("$@")
((${#SIZES[@]})) || SIZES=(64 1500)
WINDOW=${WINDOW:-5}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-1}
TESTPMD=${TESTPMD:-/usr/bin/dpdk-testpmd}
if [ -z "${DROCE_PMD:-}" ]; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  cargo build --release -q -p droce-pmd
  DROCE_PMD="${CARGO_TARGET_DIR:-target}/release/droce-pmd"
fi
[ -x "$TESTPMD" ] || { echo "bench-fwd: $TESTPMD not found: apt-get install dpdk" >&2; exit 1; }
[ -x "$DROCE_PMD" ] || { echo "bench-fwd: $DROCE_PMD not found" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || echo "bench-fwd: warning: fewer than 2 CPUs; both processes share one" >&2

TMP=$(mktemp -d /tmp/droce-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# EAL's runtime directory (dpdk-testpmd leaves its per-prefix directory behind).
if [ "$(id -u)" -eq 0 ]; then RUNDIR=/var/run/dpdk; else RUNDIR="${XDG_RUNTIME_DIR:-/tmp}/dpdk"; fi

CPU_RX=0
CPU_TX=$(( $(nproc) > 1 ? 1 : 0 ))
EAL_COMMON=(--no-huge -m 1024 --no-pci --no-shconf)
APP_COMMON=(--total-num-mbufs=16384 --burst=32 --stats-period 1)

# run_one TOOL SIZE -> prints the receiver's mean Rx-pps over the window
run_one() {
  local tool=$1 size=$2 bin tag sock rxlog txlog
  case $tool in
    testpmd) bin=$TESTPMD ;;
    droce) bin=$DROCE_PMD ;;
  esac
  tag="$tool-$size-$$-$RANDOM"
  sock="$TMP/$tag.sock"
  rxlog="$TMP/$tag.rx"
  txlog="$TMP/$tag.tx"
  # seconds to wait for the samples: the window, warm-up, and start-up (EAL init of the two
  # processes took 3 s each on 2026-11-24 with -m 1024 --no-huge; 6 s of slack was not enough)
  local total=$((WARMUP + WINDOW + 20))
  timeout -s INT $((total + 10)) "$bin" --lcores="0@$CPU_RX,1@$CPU_RX" "${EAL_COMMON[@]}" --file-prefix="rx-$tag" \
    --vdev="net_memif0,role=server,socket=$sock" -- --forward-mode=rxonly "${APP_COMMON[@]}" \
    </dev/null >"$rxlog" 2>&1 &
  local rxpid=$!
  PIDS+=("$rxpid")
  sleep 1.5
  timeout -s INT $((total + 5)) "$bin" --lcores="0@$CPU_TX,1@$CPU_TX" "${EAL_COMMON[@]}" --file-prefix="tx-$tag" \
    --vdev="net_memif0,role=client,socket=$sock" -- --forward-mode=txonly --txpkts="$size" "${APP_COMMON[@]}" \
    </dev/null >"$txlog" 2>&1 &
  local txpid=$!
  PIDS+=("$txpid")
  # Wait until the receiver has WARMUP+WINDOW non-zero samples (bounded).
  local need=$((WARMUP + WINDOW)) t=0
  while (( t < total * 4 )); do
    local n
    n=$(grep -E '^ *Rx-pps: +[1-9]' "$rxlog" | wc -l || true)
    (( n >= need )) && break
    sleep 0.25; t=$((t + 1))
  done
  # Stop the receiver first (its last samples are already printed), then the sender. DPDK
  # 22.11's memif PMD unmaps the shared regions from its interrupt thread when the peer
  # disconnects, while the datapath may be inside a burst: the side that is still polling
  # can die with SIGSEGV in librte_net_memif (seen: droce-pmd's txonly at 60+ Mpps, about 1
  # run in 8; stopping the sender first crashed dpdk-testpmd's rxonly instead, losing its
  # buffered samples). The sender's output is not used, so it is the one left exposed.
  kill -INT "$rxpid" 2>/dev/null || true; wait "$rxpid" 2>/dev/null || true
  kill -INT "$txpid" 2>/dev/null || true; wait "$txpid" 2>/dev/null || true
  rm -rf "${RUNDIR:?}/rx-$tag" "${RUNDIR:?}/tx-$tag"
  grep -E '^ *Rx-pps: +[1-9]' "$rxlog" | awk -v w="$WARMUP" -v n="$WINDOW" '
    { i++; if (i > w && i <= w + n) { s += $2; c++ } }
    END { if (c < n) { print "ERR"; exit } printf "%d\n", s / c }'
}

echo "# droce-pmd vs dpdk-testpmd: txonly -> memif -> rxonly, receiver Mpps (window ${WINDOW}s after ${WARMUP}s warm-up)"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), DPDK $(dpkg-query -W -f='${Version}' dpdk 2>/dev/null || echo '?')"
printf "| frame | dpdk-testpmd Mpps | droce-pmd Mpps | droce/testpmd |\n|---|---|---|---|\n"
status=0
for size in "${SIZES[@]}"; do
  for ((r = 1; r <= ROUNDS; r++)); do
    tp=$(run_one testpmd "$size")
    dr=$(run_one droce "$size")
    if [ "$tp" = ERR ] || [ "$dr" = ERR ] || [ -z "$tp" ] || [ -z "$dr" ]; then
      printf "| %s B | %s | %s | (no traffic measured) |\n" "$size" "$tp" "$dr"
      status=1
      continue
    fi
    awk -v s="$size" -v a="$tp" -v b="$dr" 'BEGIN { printf "| %s B | %.2f | %.2f | %.2f |\n", s, a / 1e6, b / 1e6, b / a }'
  done
done
exit $status
