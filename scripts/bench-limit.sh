#!/usr/bin/env bash
# Benchmark (not a test): droce-pmd --test=write_bw -s 65536 against the software-RoCE limit
# (dpdk/examples/roce_limit: memif frames plus one payload copy and one CRC-32 pass per frame
# per side, nothing else) at the same path MTU, alternating within each round:
#   limit(MTU) -> write_bw(MTU) -> limit(MTU), for MTU 1024 and 4096.
# Per round it prints both goodputs, the ratio write_bw / mean(limit before, limit after), and
# the ns per frame per side (each side polls one CPU, so wall ns per frame is that side's CPU
# per frame; roce_limit also reports its thread CPU time and the CRC + copy alone). At the end:
# medians and spreads (min-max) over ROUNDS.
#
# Layout: receiver/server on CPU 0, sender/client on CPU 1 (as scripts/bench-rdma.sh).
# Usage: scripts/bench-limit.sh
# Env: DROCE_PMD, ROCE_LIMIT (default: release builds), ROUNDS (3), MTUS ("1024 4096"),
#      SECS (3: the limit's window), N_BW (write_bw iterations per MTU; default 20000 at 1024,
#      30000 at 4096), LIMIT_BUF_KIB (64: the limit cycles its payload through the same
#      footprint write_bw -s 65536 touches; 8192 models a bulk transfer's buffers, which on
#      this VM cost the limit up to 10x at MTU 1024 and would flatter write_bw),
#      MEMIF_BSIZE_4096 (8192: the memif buffer size on both ends at MTU 4096, see below)
#
# memif buffers: DPDK's default bsize (2048) at MTU 1024, what users get there; bsize=8192 on
# both ends at MTU 4096, as the zero-config mesh of the libraries, so that each 4 KiB frame is
# one buffer. With 2048 both programs moved 4 KiB frames as 2-buffer chains (and droce-pmd
# now refuses that and runs at 1024: MEMIF_BSIZE_4096=2048 measures the old setup only with a
# droce-pmd from before 2026-11-28 in DROCE_PMD). BENCHMARKS.md "MTU 4096 over 8 KiB memif
# buffers".
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
if [ -z "${DROCE_PMD:-}" ]; then
  cargo build --release -q -p droce-pmd
  DROCE_PMD="${CARGO_TARGET_DIR:-target}/release/droce-pmd"
fi
if [ -z "${ROCE_LIMIT:-}" ]; then
  cargo build --release -q -p droce-dpdk --example roce_limit
  ROCE_LIMIT="${CARGO_TARGET_DIR:-target}/release/examples/roce_limit"
fi
ROUNDS=${ROUNDS:-3}
MTUS=${MTUS:-1024 4096}
SECS=${SECS:-3}
LIMIT_BUF_KIB=${LIMIT_BUF_KIB:-64}
CPU_S=0
CPU_C=$(( $(nproc) > 1 ? 1 : 0 ))
TMP=$(mktemp -d /tmp/droce-bench-limit.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
if [ "$(id -u)" -eq 0 ]; then RUNDIR=/var/run/dpdk; else RUNDIR="${XDG_RUNTIME_DIR:-/tmp}/dpdk"; fi
EAL=(--no-huge -m 1024 --no-pci --no-shconf --no-telemetry --log-level=lib.eal:error)
# the memif vdev's buffer size argument at path MTU $1 (none: DPDK's default, 2048)
bsize() { if [ "$1" -ge 4096 ]; then echo ",bsize=${MEMIF_BSIZE_4096:-8192}"; fi; }

# the value of KEY=... in FILE's last roce_limit line
kv() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$1" | tail -1; }
# limit MTU -> "goodput_MBps wall_ns_per_frame rx_cpu_ns rx_work_ns tx_cpu_ns tx_work_ns"
limit() {
  local mtu=$1 tag="lim-$1-$$-$RANDOM"
  local vd="net_memif0,socket=$TMP/$tag.sock,socket-abstract=no$(bsize "$1")"
  timeout 60 "$ROCE_LIMIT" -l $CPU_S "${EAL[@]}" --file-prefix="s-$tag" --vdev="$vd,role=server" -- rx "$SECS" "$mtu" 32 "$LIMIT_BUF_KIB" \
    >"$TMP/$tag.rx" 2>&1 &
  local rp=$!
  PIDS+=("$rp")
  sleep 1
  timeout 60 "$ROCE_LIMIT" -l $CPU_C "${EAL[@]}" --file-prefix="c-$tag" --vdev="$vd,role=client" -- tx "$((SECS + 2))" "$mtu" 32 "$LIMIT_BUF_KIB" \
    >"$TMP/$tag.tx" 2>&1 || true
  wait "$rp" || { echo "bench-limit: roce_limit rx failed:" >&2; tail -3 "$TMP/$tag.rx" >&2; }
  rm -rf "${RUNDIR:?}/s-$tag" "${RUNDIR:?}/c-$tag"
  echo "$(kv "$TMP/$tag.rx" goodput_MBps) $(kv "$TMP/$tag.rx" wall_ns_per_frame) $(kv "$TMP/$tag.rx" cpu_ns_per_frame) \
$(kv "$TMP/$tag.rx" work_ns_per_frame) $(kv "$TMP/$tag.tx" cpu_ns_per_frame) $(kv "$TMP/$tag.tx" work_ns_per_frame)"
}

# write_bw MTU N -> goodput MB/s (10^6) from perftest's "BW average" column (MiB/s)
write_bw() {
  local mtu=$1 n=$2 tag="wbw-$1-$$-$RANDOM" port=$((20000 + RANDOM % 20000))
  local vd="net_memif0,socket=$TMP/$tag.sock,socket-abstract=no$(bsize "$1")"
  timeout 120 "$DROCE_PMD" -l $CPU_S "${EAL[@]}" --file-prefix="s-$tag" --vdev="$vd,role=server" \
    -- --test=write_bw -s 65536 -m "$mtu" -n "$n" -p $port --timeout 20 --no-stats >"$TMP/$tag.s" 2>&1 &
  local sp=$!
  PIDS+=("$sp")
  sleep 1
  timeout 120 "$DROCE_PMD" -l $CPU_C "${EAL[@]}" --file-prefix="c-$tag" --vdev="$vd,role=client" \
    -- --test=write_bw -s 65536 -m "$mtu" -n "$n" -p $port --timeout 20 --no-stats 127.0.0.1 >"$TMP/$tag.c" 2>&1 \
    || { echo "bench-limit: write_bw client failed:" >&2; tail -5 "$TMP/$tag.c" >&2; }
  wait "$sp" || { echo "bench-limit: write_bw server failed:" >&2; tail -5 "$TMP/$tag.s" >&2; }
  rm -rf "${RUNDIR:?}/s-$tag" "${RUNDIR:?}/c-$tag"
  { grep -A1 "BW average" "$TMP/$tag.c" | tail -1 | awk '{ printf "%.1f\n", ($4 == "" ? 0 : $4 * 1048576 / 1e6) }'; } || echo 0
}
stats() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
  m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f (%.2f-%.2f)", m, v[1], v[NR] }'; }

echo "# droce-pmd write_bw 64 KiB vs the software-RoCE limit (roce_limit), $(date -u '+%Y-%m-%d %H:%M UTC'), HEAD $(git rev-parse --short HEAD 2>/dev/null || echo -)"
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $ROUNDS rounds, limit window ${SECS} s, limit buffers ${LIMIT_BUF_KIB} KiB, memif bsize at MTU 4096: ${MEMIF_BSIZE_4096:-8192}"
echo "# round | MTU | load | limit MB/s before / after | write_bw MB/s | ratio | ns/frame/side: limit (rx cpu, rx crc+copy, tx cpu, tx crc+copy) | write_bw"
for ((r = 1; r <= ROUNDS; r++)); do
  for mtu in $MTUS; do
    if [ "$mtu" -ge 4096 ]; then n=${N_BW:-30000}; else n=${N_BW:-20000}; fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    read -r la lwall lrc lrw ltc ltw <<<"$(limit "$mtu")"
    wb=$(write_bw "$mtu" "$n")
    read -r lb _ <<<"$(limit "$mtu")"
    awk -v m="$mtu" -v r="$r" -v l="$load" -v a="${la:-0}" -v b="${lb:-0}" -v w="$wb" -v lw="${lwall:-0}" \
      -v lrc="${lrc:-0}" -v lrw="${lrw:-0}" -v ltc="${ltc:-0}" -v ltw="${ltw:-0}" 'BEGIN {
        lim = (a + b) / 2; ratio = (lim > 0 ? w / lim : 0)
        # write_bw frames/s: 64 KiB messages of 65536/m frames each
        wns = (w > 0 ? 1e3 * m / w : 0)
        printf "# %d | %d | %s | %.0f / %.0f | %.0f | %.3f | %.0f (%.0f, %.0f, %.0f, %.0f) | %.0f\n", r, m, l, a, b, w, ratio, lw, lrc, lrw, ltc, ltw, wns
        printf "%.3f\n", ratio > "/dev/stderr" }' 2>>"$TMP/ratio-$mtu"
    echo "$wb" >>"$TMP/wb-$mtu"
    echo "$la" >>"$TMP/lim-$mtu"; echo "$lb" >>"$TMP/lim-$mtu"
    awk -v m="$mtu" -v w="$wb" 'BEGIN { if (w > 0) printf "%.1f\n", 1e3 * m / w }' >>"$TMP/wns-$mtu"
    echo "$lwall" >>"$TMP/lns-$mtu"
  done
done
echo
echo "Medians over $ROUNDS rounds (min-max); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf "| MTU | limit MB/s | write_bw 64 KiB MB/s | write_bw / limit (same round) | ns/frame/side limit | ns/frame/side write_bw |\n|---|---|---|---|---|---|\n"
for mtu in $MTUS; do
  printf "| %s | %s | %s | %s | %s | %s |\n" "$mtu" "$(stats <"$TMP/lim-$mtu")" "$(stats <"$TMP/wb-$mtu")" "$(stats <"$TMP/ratio-$mtu")" \
    "$(stats <"$TMP/lns-$mtu")" "$(stats <"$TMP/wns-$mtu")"
done
