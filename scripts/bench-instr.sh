#!/usr/bin/env bash
# Benchmark helper (not a test): instructions per data frame per side of droce-pmd
# --test=write_bw -s 65536 (env TEST=read_bw or send_bw for those tests) over a memif pair, both processes under callgrind. Instruction
# counts do not depend on the load of a shared machine (wall clock and cycles do; this VM has
# no PMU for `perf stat`), so before/after comparisons of the per-frame path hold on a busy host.
#
# Counted per frame: the inclusive instructions of `RoceDevice::transmit_one` (one frame from
# the transport into an mbuf, routed) and `RoceDevice::rx_frames` (one RX burst's frames
# through the receive path) on each side, divided by the data frames (N x 65536 / MTU). Idle
# polls, whose number depends on the relative speed of the two processes, are left out, and so
# are the PMD's burst functions (KEEP=1 keeps the callgrind files for callgrind_annotate).
# The data sender is the client in write_bw and send_bw, the server in read_bw (its READ
# responses); the rows name the sides by the data, not by the role.
# A large ACK timeout (-u 22, 17 s) keeps valgrind's slowness from causing retransmissions;
# the script prints the retransmission counter, which must be 0 for a valid row.
#
# The two functions are out of line only with the droce-dpdk feature frame-profile:
#   cargo build --release -p droce-pmd --features droce-dpdk/frame-profile
# (a normal build inlines them, and this script then finds no counts to divide).
#
# Usage: [TEST=read_bw] scripts/bench-instr.sh PMD MTU N [VAR=value ...]    (e.g. target/release/droce-pmd 1024 300)
set -u
TEST=${TEST:-write_bw}
PMD=$1; MTU=$2; N=$3; shift 3
command -v valgrind >/dev/null || { echo "bench-instr: needs valgrind" >&2; exit 2; }
OUT=$(mktemp -d /tmp/droce-instr.XXXXXX)
KEEP=${KEEP:-}
tag="in-$MTU-$$-$RANDOM"; port=$((20000 + RANDOM % 20000))
# bsize=8192 on both ends at MTU 4096 (one frame per memif buffer, as the zero-config mesh;
# MEMIF_BSIZE_4096 overrides), DPDK's default 2048 below: see scripts/bench-limit.sh
[ "$MTU" -ge 4096 ] && vd_bsize=",bsize=${MEMIF_BSIZE_4096:-8192}" || vd_bsize=
vd="net_memif0,socket=$OUT/s.sock,socket-abstract=no$vd_bsize"
EAL=(--no-huge -m 1024 --no-pci --no-shconf --no-telemetry --log-level=lib.eal:error)
VG=(valgrind --tool=callgrind --dump-instr=no)
APP=(--test=$TEST -s 65536 -m "$MTU" -n "$N" -p $port -u 22 --timeout 120)
env "$@" timeout 600 "${VG[@]}" --callgrind-out-file="$OUT/cg.s" "$PMD" -l 0 "${EAL[@]}" --file-prefix="s-$tag" \
  --vdev="$vd,role=server" -- "${APP[@]}" >"$OUT/s" 2>&1 &
sp=$!
sleep 8
env "$@" timeout 600 "${VG[@]}" --callgrind-out-file="$OUT/cg.c" "$PMD" -l 1 "${EAL[@]}" --file-prefix="c-$tag" \
  --vdev="$vd,role=client" -- "${APP[@]}" 127.0.0.1 >"$OUT/c" 2>&1
wait $sp
F=$(( N * 65536 / MTU ))
# inclusive instructions of the function whose name ends in $2 (its own entry line)
inc() { callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | grep -F "$2 [" | grep -v "???:0x" | head -1 \
  | awk '{ gsub(",", "", $1); print $1 }'; }
# the data sender's callgrind file, then the data receiver's
snd=c rcv=s; [ "$TEST" = read_bw ] && snd=s rcv=c
retx=$(grep -h retransmitted_pkts "$OUT/c" | awk '{ print $4 }')
awk -v F="$F" -v mtu="$MTU" -v retx="${retx:-?}" -v test="$TEST" \
  -v ctx="$(inc "$OUT/cg.$snd" 'RoceDevice>::transmit_one')" -v crx="$(inc "$OUT/cg.$snd" 'RoceDevice>::rx_frames')" \
  -v cpt="$(inc "$OUT/cg.$snd" 'Device<M>>::poll_transmit')" \
  -v srx="$(inc "$OUT/cg.$rcv" 'RoceDevice>::rx_frames')" -v stx="$(inc "$OUT/cg.$rcv" 'RoceDevice>::transmit_one')" 'BEGIN {
  printf "%s MTU %d, %d data frames, retransmitted %s | instructions per data frame: sender %.0f (transport poll_transmit %.0f), receiver %.0f\n",
    test, mtu, F, retx, (ctx + crx) / F, cpt / F, (srx + stx) / F }'
[ -n "$KEEP" ] && echo "callgrind files: $OUT" && exit 0
rm -rf "$OUT" "${XDG_RUNTIME_DIR:-/tmp}/dpdk/s-$tag" "${XDG_RUNTIME_DIR:-/tmp}/dpdk/c-$tag" /var/run/dpdk/s-$tag /var/run/dpdk/c-$tag 2>/dev/null
