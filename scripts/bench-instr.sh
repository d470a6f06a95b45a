#!/usr/bin/env bash
# Benchmark helper (not a test): instructions per data frame per side of droce-pmd
# --test=write_bw -s 65536 (env TEST=read_bw or send_bw for those tests) over a memif pair, both processes under callgrind. Instruction
# counts do not depend on the load of a shared machine (wall clock and cycles do; this VM has
# no PMU for `perf stat`), so before/after comparisons of the per-frame path hold on a busy host.
#
# Counted per frame: the inclusive instructions of `RoceDevice::transmit_one` (one frame from
# the transport into an mbuf, routed; `transmit_frames`, one TX step's frames, in builds that
# have it) and `RoceDevice::rx_frames` (one RX burst's frames through the receive path) on each
# side, divided by the data frames (N x 65536 / MTU). The transport's share of the sender is
# `Device::poll_transmit` (or `TxTrain::next` plus the train's end, `TxTrain::finish`, in builds
# with segment trains). With TEST=read_bw the data frames are READ responses, sent by the
# server: the sender is then the server, the receiver the client. Idle
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
# Usage: [TEST=read_bw|send_bw] scripts/bench-instr.sh PMD MTU N [VAR=value ...]    (e.g. target/release/droce-pmd 1024 300)
set -u
TEST=${TEST:-write_bw}
PMD=$1; MTU=$2; N=$3; shift 3
command -v valgrind >/dev/null || { echo "bench-instr: needs valgrind" >&2; exit 2; }
OUT=$(mktemp -d /tmp/droce-instr.XXXXXX)
KEEP=${KEEP:-}
case $TEST in write_bw|read_bw|send_bw) ;; *) echo "bench-instr: TEST is write_bw, read_bw or send_bw" >&2; exit 2;; esac
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
# the sender's and the receiver's files: the client sends write_bw's data, the server read_bw's
if [ "$TEST" = read_bw ]; then snd=s; rcv=c; else snd=c; rcv=s; fi
retx=$(cat "$OUT/c" "$OUT/s" | grep -h retransmitted_pkts | awk '{ n += $4 } END { print n + 0 }')
# the transmit step: one function per frame (transmit_one) or per TX step (transmit_frames)
tx() { local v; v=$(inc "$1" 'RoceDevice>::transmit_frames'); [ -n "$v" ] && echo "$v" || inc "$1" 'RoceDevice>::transmit_one'; }
# the transport's share: poll_transmit, or a train's frames and ends
tp() { local a b; a=$(inc "$1" 'TxTrain<M>::next'); b=$(inc "$1" 'TxTrain<M>::finish')
  [ -n "$a" ] && echo $(( a + ${b:-0} )) || inc "$1" 'Device<M>>::poll_transmit'; }
awk -v F="$F" -v mtu="$MTU" -v t="$TEST" -v retx="${retx:-?}" \
  -v ctx="$(tx "$OUT/cg.$snd")" -v crx="$(inc "$OUT/cg.$snd" 'RoceDevice>::rx_frames')" \
  -v cpt="$(tp "$OUT/cg.$snd")" \
  -v srx="$(inc "$OUT/cg.$rcv" 'RoceDevice>::rx_frames')" -v stx="$(tx "$OUT/cg.$rcv")" 'BEGIN {
  printf "%s MTU %d, %d data frames, retransmitted %s | instructions per data frame: sender %.0f (transport %.0f), receiver %.0f\n",
    t, mtu, F, retx, (ctx + crx) / F, cpt / F, (srx + stx) / F }'
[ -n "$KEEP" ] && echo "callgrind files: $OUT" && exit 0
rm -rf "$OUT" "${XDG_RUNTIME_DIR:-/tmp}/dpdk/s-$tag" "${XDG_RUNTIME_DIR:-/tmp}/dpdk/c-$tag" /var/run/dpdk/s-$tag /var/run/dpdk/c-$tag 2>/dev/null
