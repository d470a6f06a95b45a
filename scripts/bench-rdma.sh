#!/usr/bin/env bash
# Benchmark (not a test): droce-pmd's RDMA modes between two processes over memif, as ratios
# against the raw memif limit that dpdk-testpmd (txonly -> rxonly, scripts/bench-fwd.sh)
# measures in the same run at the same frame size; latency compared with libfabric's tcp
# provider (fi_pingpong on loopback, apt-get install libfabric-bin) in the same run.
#
#   write_bw 64 KiB (IB MTU 1024 -> 1082-byte frames: 14 Eth + 20 IPv4 + 8 UDP + 12 BTH + 1024 +
#            4 ICRC; the first of each message has a 16-byte RETH): goodput vs raw frame bytes/s
#            at 1082 B                                                           target >= 0.8
#   send_bw  64 B (122-byte frames): message rate vs raw pps at 122 B             target >= 0.5
#   send_lat / write_lat 8 B: t_typical (half round trip, perftest's definition) vs
#            fi_pingpong -p tcp -S 8 usec/xfer on 127.0.0.1
#
# Layout: server pinned to CPU 0 (-l 0), client to CPU 1 (-l 1); each has one polling lcore.
# Usage: scripts/bench-rdma.sh        Env: DROCE_PMD=path (default: release build), N_BW, N_MSG, N_LAT, N_FI
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${DROCE_PMD:-}" ]; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  cargo build --release -q -p droce-pmd
  DROCE_PMD="${CARGO_TARGET_DIR:-target}/release/droce-pmd"
fi
export DROCE_PMD
N_BW=${N_BW:-20000}
N_MSG=${N_MSG:-2000000}
N_LAT=${N_LAT:-20000}
N_FI=${N_FI:-2000}
CPU_S=0
CPU_C=$(( $(nproc) > 1 ? 1 : 0 ))
TMP=$(mktemp -d /tmp/droce-bench-rdma.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
if [ "$(id -u)" -eq 0 ]; then RUNDIR=/var/run/dpdk; else RUNDIR="${XDG_RUNTIME_DIR:-/tmp}/dpdk"; fi
EAL=(--no-huge -m 1024 --no-pci --no-shconf --no-telemetry --log-level=lib.eal:error)

# rdma TEST ARGS... -> the client's output in $TMP/TEST.c (server's in .s)
rdma() {
  local test=$1; shift
  local tag="$test-$$-$RANDOM" port=$((20000 + RANDOM % 20000))
  timeout 120 "$DROCE_PMD" -l $CPU_S "${EAL[@]}" --file-prefix="s-$tag" --vdev="net_memif0,role=server,socket=$TMP/$tag.sock" \
    -- --test="$test" -p $port --timeout 20 "$@" >"$TMP/$test.s" 2>&1 &
  local sp=$!
  PIDS+=("$sp")
  sleep 1
  timeout 120 "$DROCE_PMD" -l $CPU_C "${EAL[@]}" --file-prefix="c-$tag" --vdev="net_memif0,role=client,socket=$TMP/$tag.sock" \
    -- --test="$test" -p $port --timeout 20 "$@" 127.0.0.1 >"$TMP/$test.c" 2>&1 || { echo "bench-rdma: $test client failed:" >&2; cat "$TMP/$test.c" >&2; }
  wait "$sp" || { echo "bench-rdma: $test server failed:" >&2; tail -5 "$TMP/$test.s" >&2; }
  rm -rf "${RUNDIR:?}/s-$tag" "${RUNDIR:?}/c-$tag"
}
# the row after the column header line
row_after() { grep -A1 "$2" "$1" | tail -1; }

echo "# droce-pmd RDMA over memif vs raw memif (dpdk-testpmd) and fi_pingpong tcp, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg)"

echo "# raw memif limit (scripts/bench-fwd.sh 1082 122, dpdk-testpmd column):"
WINDOW=${WINDOW:-4} WARMUP=${WARMUP:-1} scripts/bench-fwd.sh 1082 122 | tee "$TMP/raw" | sed 's/^/#   /'
raw_pps() { awk -F'|' -v s="$1 B" '$2 ~ s { gsub(/ /, "", $3); print $3 * 1e6 }' "$TMP/raw"; }
RAW_1082=$(raw_pps 1082)
RAW_122=$(raw_pps 122)

rdma write_bw -s 65536 -n "$N_BW" --no-stats
rdma send_bw -s 64 -n "$N_MSG" --no-stats
rdma send_lat -s 8 -n "$N_LAT" --no-stats
rdma write_lat -s 8 -n "$N_LAT" --no-stats
WB=$(row_after "$TMP/write_bw.c" "BW average")
SB=$(row_after "$TMP/send_bw.c" "BW average")
SL=$(row_after "$TMP/send_lat.c" "t_typical")
WL=$(row_after "$TMP/write_lat.c" "t_typical")

FI="-"
if command -v fi_pingpong >/dev/null; then
  fport=$((40000 + RANDOM % 10000))
  # the tcp provider's RDM endpoint (its MSG endpoint needs a CM exchange fi_pingpong's
  # default path does not do on every version); server -B port, client -P port
  taskset -c $CPU_S timeout 120 fi_pingpong -p tcp -e rdm -I "$N_FI" -S 8 -B $fport >"$TMP/fi.s" 2>&1 &
  fp=$!
  PIDS+=("$fp")
  sleep 1
  taskset -c $CPU_C timeout 120 fi_pingpong -p tcp -e rdm -I "$N_FI" -S 8 -P $fport 127.0.0.1 >"$TMP/fi.c" 2>&1 || true
  wait "$fp" || true
  # columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
  FI=$(awk '$1 == "8" { print $(NF-1) }' "$TMP/fi.c" | tail -1)
  [ -n "$FI" ] || { FI="-"; echo "bench-rdma: fi_pingpong gave no figure:" >&2; cat "$TMP/fi.c" >&2; }
else
  echo "bench-rdma: fi_pingpong not installed (apt-get install libfabric-bin): no libfabric comparison" >&2
fi

echo
printf "| test | droce | raw memif / reference | ratio | target |\n|---|---|---|---|---|\n"
awk -v row="$WB" -v raw="$RAW_1082" 'BEGIN { split(row, f, " "); avg = f[4] * 1048576; rb = raw * 1082;
  printf "| write_bw 64 KiB goodput | %.0f MB/s (%s iters) | %.0f MB/s frame bytes (%.3f Mpps x 1082 B) | %.2f | >= 0.8 |\n", avg / 1e6, f[2], rb / 1e6, raw / 1e6, avg / rb }'
awk -v row="$SB" -v raw="$RAW_122" 'BEGIN { split(row, f, " "); r = f[5] * 1e6;
  printf "| send_bw 64 B msg rate | %.3f Mpps | %.3f Mpps raw at 122 B | %.2f | >= 0.5 |\n", r / 1e6, raw / 1e6, r / raw }'
awk -v row="$SL" -v fi="$FI" 'BEGIN { split(row, f, " ");
  printf "| send_lat 8 B t_typical | %.2f us (avg %.2f, 99%% %.2f) | fi_pingpong tcp %s us/xfer | %s | report |\n", f[5], f[6], f[8], fi, (fi == "-" ? "-" : sprintf("%.2f", f[5] / fi)) }'
awk -v row="$WL" -v fi="$FI" 'BEGIN { split(row, f, " ");
  printf "| write_lat 8 B t_typical | %.2f us (avg %.2f, 99%% %.2f) | fi_pingpong tcp %s us/xfer | %s | report |\n", f[5], f[6], f[8], fi, (fi == "-" ? "-" : sprintf("%.2f", f[5] / fi)) }'
