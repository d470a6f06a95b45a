#!/usr/bin/env bash
# Benchmark helper (not a test): one droce-pmd --test=write_bw -s 65536 pair over memif,
# server on CPU 0, client on CPU 1; prints the goodput in MB/s (1e6). For off/on A/Bs of an
# environment switch, alternate calls (BENCHMARKS.md, "zero-copy transmit and one-pass receive").
# Usage: scripts/bench-wbw-pair.sh PMD MTU ITERATIONS [VAR=value ...]
set -u
PMD=$1; MTU=$2; N=$3; shift 3
TMP=$(mktemp -d /tmp/zc-wbw.XXXXXX)
tag="zc-$MTU-$$-$RANDOM"; port=$((20000 + RANDOM % 20000))
# bsize=8192 on both ends at MTU 4096 (one frame per memif buffer, as the zero-config mesh;
# MEMIF_BSIZE_4096 overrides), DPDK's default 2048 below: see scripts/bench-limit.sh
[ "$MTU" -ge 4096 ] && vd_bsize=",bsize=${MEMIF_BSIZE_4096:-8192}" || vd_bsize=
vd="net_memif0,socket=$TMP/s.sock,socket-abstract=no$vd_bsize"
EAL=(--no-huge -m 1024 --no-pci --no-shconf --no-telemetry --log-level=lib.eal:error)
env "$@" timeout 120 "$PMD" -l 0 "${EAL[@]}" --file-prefix="s-$tag" --vdev="$vd,role=server" \
  -- --test=write_bw -s 65536 -m "$MTU" -n "$N" -p $port --timeout 20 --no-stats >"$TMP/s" 2>&1 &
sp=$!
sleep 1
env "$@" timeout 120 "$PMD" -l 1 "${EAL[@]}" --file-prefix="c-$tag" --vdev="$vd,role=client" \
  -- --test=write_bw -s 65536 -m "$MTU" -n "$N" -p $port --timeout 20 --no-stats 127.0.0.1 >"$TMP/c" 2>&1
wait $sp
v=$(grep -A1 "BW average" "$TMP/c" | tail -1 | awk '{ printf "%.1f\n", ($4 == "" ? 0 : $4 * 1048576 / 1e6) }')
echo "${v:-0}"
[ "${v:-0}" = "0" ] && tail -3 "$TMP/c" >&2
rm -rf "$TMP" "${XDG_RUNTIME_DIR:-/tmp}/dpdk/s-$tag" "${XDG_RUNTIME_DIR:-/tmp}/dpdk/c-$tag" /var/run/dpdk/s-$tag /var/run/dpdk/c-$tag 2>/dev/null
