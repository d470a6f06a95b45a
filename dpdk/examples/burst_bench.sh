#!/usr/bin/env bash
# Burst-API microbenchmark against dpdk-testpmd (not a test; figures depend on the machine's load).
#   dpdk/examples/burst_bench.sh null  [SECONDS] [SIZE]   txonly on net_null, one process
#   dpdk/examples/burst_bench.sh memif [SECONDS] [SIZE]   txonly (memif server) -> rxonly (memif client), two processes
# Prints Mpps for burst_bench (droce-dpdk) and dpdk-testpmd, and the ratio.
set -euo pipefail
WHAT=${1:-null}; SECS=${2:-5}; SIZE=${3:-64}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build -q --release -p droce-dpdk --example burst_bench
BIN=$CARGO_TARGET_DIR/release/examples/burst_bench
TMP=$(mktemp -d /tmp/droce-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
EAL="--no-huge -m 1024 --no-pci --no-shconf --no-telemetry --log-level=lib.eal:error"
TP_APP="--stats-period 1 --txpkts=$SIZE --burst=32 --total-num-mbufs=16384 --auto-start"

# testpmd prints Tx-pps/Rx-pps each second; take the median of the non-zero samples after the
# first (ramp-up) one.
tp_pps() { grep -E "$1-pps:" "$2" | awk '$2 > 0 {print $2}' | tail -n +2 | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]/1e6; else print 0}'; }

case $WHAT in
null)
  ours=$("$BIN" $EAL --file-prefix=bb-$$ -l 1 --vdev=net_null0 -- txonly "$SECS" "$SIZE" 32 | sed -n 's/.*tx_mpps=\([0-9.]*\).*/\1/p')
  timeout -s INT "$((SECS + 1))" dpdk-testpmd $EAL --file-prefix=bbt-$$ -l 0-1 --vdev=net_null0 -- \
    --forward-mode=txonly $TP_APP </dev/null >"$TMP/tp.log" 2>&1 || true
  theirs=$(tp_pps Tx "$TMP/tp.log")
  ;;
memif)
  S=$TMP/memif.sock
  V="socket=$S,socket-abstract=no"
  "$BIN" $EAL --file-prefix=bbs-$$ -l 0 --vdev=net_memif0,role=server,$V -- rxonly "$((SECS + 2))" "$SIZE" 32 >"$TMP/rx.log" 2>&1 &
  PIDS+=($!); sleep 1
  "$BIN" $EAL --file-prefix=bbc-$$ -l 1 --vdev=net_memif0,role=client,$V -- txonly "$SECS" "$SIZE" 32 >"$TMP/tx.log" 2>&1
  wait "${PIDS[0]}" || true
  ours=$(sed -n 's/.*rx_mpps=\([0-9.]*\).*/\1/p' "$TMP/rx.log")
  # received packets over the receiver's whole (longer) window understate the rate; use tx side
  # opackets/secs only if the receiver counted them all
  ours_tx=$(sed -n 's/.*tx_mpps=\([0-9.]*\).*/\1/p' "$TMP/tx.log")
  echo "burst_bench tx side: ${ours_tx} Mpps; rx log: $(tail -1 "$TMP/rx.log")"
  ours=$ours_tx
  rm -f "$S"
  timeout -s INT "$((SECS + 3))" dpdk-testpmd $EAL --file-prefix=bbts-$$ --lcores=0@1,1@0 --vdev=net_memif0,role=server,$V -- \
    --forward-mode=rxonly $TP_APP </dev/null >"$TMP/tprx.log" 2>&1 &
  PIDS+=($!); sleep 1
  timeout -s INT "$((SECS + 1))" dpdk-testpmd $EAL --file-prefix=bbtc-$$ --lcores=0@0,1@1 --vdev=net_memif0,role=client,$V -- \
    --forward-mode=txonly $TP_APP </dev/null >"$TMP/tptx.log" 2>&1 || true
  wait "${PIDS[1]}" || true
  theirs=$(tp_pps Tx "$TMP/tptx.log")
  echo "testpmd rx side median: $(tp_pps Rx "$TMP/tprx.log") Mpps"
  ;;
*) echo "usage: $0 null|memif [SECONDS] [SIZE]" >&2; exit 2 ;;
esac
for d in /var/run/dpdk/bb*-$$; do rm -rf "$d"; done 2>/dev/null || true
ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
echo "$WHAT size=$SIZE: droce-dpdk burst_bench ${ours} Mpps, dpdk-testpmd ${theirs} Mpps, ratio ${ratio}"
