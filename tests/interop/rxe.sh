#!/usr/bin/env bash
# Interop of droce-pmd's RDMA test modes with Linux soft-RoCE (rdma_rxe) in throw-away VMs.
# Uses the rxe-vm harness (see its README), an optional external tool that is not part of this
# repository; without it the script prints one SKIP line and exits 0. Two Debian VMs
# run rxe on a bridge inside netns "rxehost"; droce-pmd runs in that netns on the spare veth
# rxeuser0 (DPDK af_packet PMD, MAC 02:77:00:00:00:02) and claims 192.168.77.2. The TCP
# exchange of ibv_*_pingpong / perftest runs over the netns kernel's TCP (192.168.77.1), the
# RoCEv2 frames use 192.168.77.2 (the GID droce announces).
#
# usage (as root):  tests/interop/rxe.sh [-l] [CASE...]
#   -l        list the cases and exit
#   CASE      a case name or a prefix/glob (e.g. rc_pingpong*, 'atomic*'); default: all
# environment:
#   RXE_VM_DIR      the external harness's directory (default: ../shared/tools/rxe-vm beside
#                   the project)
#   INTEROP_OUT     artefact directory (default: <project>/target/interop/<UTC date-time>)
#   INTEROP_ITERS   iterations per case (default 200)
#   INTEROP_TIMEOUT seconds allowed per process (default 120; TCG is slow)
#   INTEROP_REUSE=1 reuse VMs that are already running (default: clean start)
#   INTEROP_KEEP=1  leave the VMs running at the end (default: stop them)
#   DROCE_PMD       droce-pmd binary (default: build it, release, in $CARGO_TARGET_DIR or target/)
#   DROCE_DUMP      droce-dump binary (default: build it, release)
#   EAL_EXTRA       extra EAL arguments for droce-pmd
# Output: one "PASS|FAIL|SKIP <case>: <why>" line per case, then "N passed, N failed, N skipped".
# Exit status: 0 when nothing failed (skips included), 1 when a case failed, 0 with one SKIP
# line when the harness cannot run here (not root, no qemu, no usable accelerator, ...).
# Artefacts per case in $INTEROP_OUT: <case>.pcap (bridge capture: ARP, TCP 18515, UDP 4791),
# <case>.dump (droce-dump of it, every ICRC checked), <case>.droce.log, <case>.vm.log,
# <case>.counters (rxe hw_counters before/after, vm0).
set -uo pipefail
{ # the whole script is one compound command: bash parses it before running it, so editing
  # the file while it runs cannot derail a run
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RXE_VM_DIR=${RXE_VM_DIR:-$(cd "$ROOT/.." && pwd)/shared/tools/rxe-vm}
ITERS=${INTEROP_ITERS:-200}
TMO=${INTEROP_TIMEOUT:-120}
NS=rxehost BR=rxebr0 UIF=rxeuser0
HOST_TCP_IP=192.168.77.1      # the netns kernel (TCP exchange)
DROCE_IP=192.168.77.2         # what droce claims on rxeuser0 (RoCE frames)
VM0_IP=192.168.77.10 VM0_MAC=52:54:00:77:00:10
DROCE_MAC=02:77:00:00:00:02
TCP_PORT=18515 RPING_PORT=7174

log() { printf '[interop %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
skip_all() { echo "SKIP rxe-interop: $*"; echo "0 passed, 0 failed, 1 skipped"; exit 0; }

# ---------------------------------------------------------------------------------------------
# cases: name -> function. Each function returns 0 PASS, 1 FAIL, 2 SKIP and sets WHY.
CASES=(
  transport_rc_pingpong_64_droce_server transport_rc_pingpong_64_droce_client
  transport_rc_pingpong_4096_droce_server transport_rc_pingpong_4096_droce_client
  transport_rc_pingpong_loss5_droce_server transport_rc_pingpong_loss5_droce_client
  transport_ud_pingpong_droce_server transport_ud_pingpong_droce_client
  transport_send_lat_droce_server transport_send_lat_droce_client
  transport_write_bw_droce_server transport_write_bw_droce_client
  transport_read_lat_droce_server transport_read_lat_droce_client
  transport_atomic_lat_fadd_droce_server transport_atomic_lat_fadd_droce_client
  transport_atomic_lat_cswap_droce_server transport_atomic_lat_cswap_droce_client
  rc_pingpong_64_droce_server rc_pingpong_64_droce_client
  rc_pingpong_4096_droce_server rc_pingpong_4096_droce_client
  ud_pingpong_droce_server ud_pingpong_droce_client
  send_lat_droce_server send_lat_droce_client
  write_bw_droce_server write_bw_droce_client
  read_lat_droce_server read_lat_droce_client
  atomic_lat_fadd_droce_server atomic_lat_fadd_droce_client
  atomic_lat_cswap_droce_server atomic_lat_cswap_droce_client
  rping_droce_server rping_droce_client
  rc_pingpong_loss5_droce_server rc_pingpong_loss5_droce_client
)
if [ "${1:-}" = -l ]; then printf '%s\n' "${CASES[@]}"; exit 0; fi
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi

# ---------------------------------------------------------------------------------------------
# can we run at all? (one SKIP line and exit 0 otherwise)
[ "$(id -u)" = 0 ] || skip_all "must run as root (netns, tap devices and qemu need it); re-run with sudo"
for f in build.sh start.sh stop.sh vm-exec.sh common.sh; do
  [ -r "$RXE_VM_DIR/$f" ] || skip_all "rxe-vm harness not found: $RXE_VM_DIR/$f is missing (set RXE_VM_DIR)"
done
# A fresh machine (CI) has neither qemu nor debootstrap: the harness's build.sh installs its
# host tools itself (qemu-system-x86 from bookworm-backports where bookworm's clashes with
# the installed qemu-utils) and builds the VM image; DROCE_INTEROP_INSTALL=0 leaves that out.
if [ "${DROCE_INTEROP_INSTALL:-1}" = 1 ] && ! { command -v qemu-system-x86_64 && command -v debootstrap; } >/dev/null; then
  log "installing the rxe-vm harness's host tools and building its image (build.sh, ~3 min the first time)"
  PRE_LOG=$(mktemp /tmp/droce-rxe-build.XXXXXX)
  "$RXE_VM_DIR/build.sh" >"$PRE_LOG" 2>&1 || { tail -5 "$PRE_LOG" >&2; log "build.sh failed (log: $PRE_LOG)"; }
fi
command -v qemu-system-x86_64 >/dev/null || skip_all "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
command -v debootstrap >/dev/null || [ -f /var/tmp/rxe-vm/rootfs.img ] || skip_all "debootstrap is not installed and no VM image exists (apt-get install debootstrap)"
for b in tcpdump ip timeout ss; do command -v $b >/dev/null || skip_all "'$b' is not installed"; done
accels=$(qemu-system-x86_64 -accel help 2>/dev/null)
if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; } && grep -qw kvm <<<"$accels"; then
  ACCEL=kvm
elif grep -qw tcg <<<"$accels"; then
  ACCEL=tcg
else
  skip_all "qemu offers neither a usable KVM (kvm_intel/kvm_amd) nor TCG ('qemu-system-x86_64 -accel help': $(tr '\n' ' ' <<<"$accels"))"
fi
ip netns list >/dev/null 2>&1 || skip_all "network namespaces are not usable here ('ip netns list' fails)"

# ---------------------------------------------------------------------------------------------
# binaries
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
TDIR=${CARGO_TARGET_DIR:-$ROOT/target}
if [ -z "${DROCE_PMD:-}" ] || [ -z "${DROCE_DUMP:-}" ]; then
  command -v cargo >/dev/null || skip_all "cargo not found and DROCE_PMD/DROCE_DUMP not given"
  log "building droce-pmd and droce-dump (release, $TDIR)"
  (cd "$ROOT" && cargo build --release --bin droce-pmd --bin droce-dump -p droce-pmd -p droce-transport) >&2 \
    || { echo "FAIL rxe-interop: cargo build of droce-pmd/droce-dump failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
fi
# the transport-only peer (droce_transport::Device over a raw AF_PACKET socket, no DPDK)
if [ -z "${DROCE_PROBE:-}" ] && command -v cargo >/dev/null; then
  log "building droce-rxe-probe (release, $TDIR/probe)"
  CARGO_TARGET_DIR=$TDIR/probe cargo build --release --manifest-path "$ROOT/tests/interop/probe/Cargo.toml" >&2 \
    || { echo "FAIL rxe-interop: cargo build of tests/interop/probe failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
fi
DROCE_PROBE=${DROCE_PROBE:-$TDIR/probe/release/droce-rxe-probe}
DROCE_PMD=${DROCE_PMD:-$TDIR/release/droce-pmd}
DROCE_DUMP=${DROCE_DUMP:-$TDIR/release/droce-dump}
# what droce-pmd offers: its main help, the RDMA test help and the rping help (each mode
# prints its own usage with --help before initialising EAL)
DROCE_USAGE=$({ "$DROCE_PMD" --help; "$DROCE_PMD" -- --test=send_lat --help; "$DROCE_PMD" -- --test=rping --help; } 2>&1 </dev/null || true)

# ---------------------------------------------------------------------------------------------
# artefacts, cleanup
OUT=${INTEROP_OUT:-$ROOT/target/interop/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT" || { echo "FAIL rxe-interop: cannot create $OUT"; exit 1; }
OUT=$(cd "$OUT" && pwd)
X="$RXE_VM_DIR/vm-exec.sh"
PIDS=()          # our own background processes (tcpdump, droce-pmd), killed by PID on exit
NETEM_ON=0
STARTED_VMS=0
kill_pid() {  # kill_pid PID: TERM, then KILL after 5 s; only our own children
  local p=$1 n
  kill -0 "$p" 2>/dev/null || return 0
  kill -TERM "$p" 2>/dev/null
  for n in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null
}
cleanup() {
  local p
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill_pid "$p"; done
  if [ "$NETEM_ON" = 1 ]; then "$X" -t 20 0 'tc qdisc del dev eth0 root' >/dev/null 2>&1; fi
  if [ "$STARTED_VMS" = 1 ] && [ "${INTEROP_KEEP:-0}" != 1 ]; then
    log "stopping the VMs"; "$RXE_VM_DIR/stop.sh" >>"$OUT/harness.log" 2>&1 || log "stop.sh failed (see $OUT/harness.log)"
  fi
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# harness: build the image (idempotent), clean start of two VMs
. <(grep -E '^(RXE_TOP|RXE_RUN)=' "$RXE_VM_DIR/common.sh")
vm_running() { local f="$RXE_RUN/vm$1/qemu.pid"; [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }
t0=$SECONDS
log "harness: build.sh (accelerator $ACCEL)"
if ! RXE_ACCEL=$ACCEL "$RXE_VM_DIR/build.sh" >>"$OUT/harness.log" 2>&1; then
  tail -5 "$OUT/harness.log" >&2
  skip_all "the rxe-vm image could not be built (needs debootstrap and deb.debian.org); log: $OUT/harness.log"
fi
if vm_running 0 && vm_running 1 && [ "${INTEROP_REUSE:-0}" = 1 ]; then
  log "reusing the running VMs (INTEROP_REUSE=1)"
else
  if vm_running 0 || vm_running 1 || ip netns list | grep -qw "$NS"; then
    log "stopping VMs/netns left from an earlier run"; "$RXE_VM_DIR/stop.sh" >>"$OUT/harness.log" 2>&1
  fi
  log "harness: start.sh 2 (TCG: about a minute)"
  STARTED_VMS=1
  # under TCG on a loaded machine a boot can exceed the harness's 240 s default
  RXE_BOOT_TIMEOUT=${RXE_BOOT_TIMEOUT:-600} RXE_ACCEL=$ACCEL "$RXE_VM_DIR/start.sh" 2 >>"$OUT/harness.log" 2>&1 \
    || { tail -5 "$OUT/harness.log" >&2; echo "FAIL rxe-interop: start.sh failed (log: $OUT/harness.log)"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
fi
G=$(sed -n 's/^gid_index=//p' "$RXE_RUN/vm0/shared/ready")
[ -n "$G" ] || G=1
log "VMs ready after $((SECONDS - t0)) s; vm0 $VM0_IP rxe0 GID index $G; artefacts in $OUT"
"$X" -t 30 0 'uname -r; rdma link; ibv_devinfo -d rxe0 | grep -E "active_mtu|state"' >"$OUT/vm0-info.txt" 2>&1

# ---------------------------------------------------------------------------------------------
# helpers used by the cases
CASE= WHY=
DROCE_PID= DROCE_RC= VM_JOB= SEQ=0
droce_has_mode() { grep -q -- "$1" <<<"$DROCE_USAGE"; }
need_mode() {  # need_mode MODE: SKIP unless droce-pmd knows --test=MODE (its help for it names it)
  local h
  if ! h=$(timeout 20 "$DROCE_PMD" -- "--test=$1" --help 2>&1 </dev/null) || ! grep -qw -- "$1" <<<"$h"; then
    WHY="droce-pmd has no --test=$1 mode ('droce-pmd -- --test=$1 --help' does not describe it)"; return 2
  fi
}
cap_start() {
  rm -f "$OUT/$CASE.pcap"
  ip netns exec "$NS" tcpdump -i "$BR" --immediate-mode -U -B 16384 -s 0 -w "$OUT/$CASE.pcap" \
    "arp or udp port 4791 or tcp port $TCP_PORT" 2>"$OUT/$CASE.tcpdump.err" &
  CAP_PID=$!; PIDS+=("$CAP_PID")
  local n; for n in $(seq 50); do grep -qs 'listening on' "$OUT/$CASE.tcpdump.err" && return 0; sleep 0.1; done
  log "tcpdump did not start: $(cat "$OUT/$CASE.tcpdump.err")"
}
cap_stop() { sleep 0.5; kill -INT "$CAP_PID" 2>/dev/null; local n; for n in $(seq 50); do kill -0 "$CAP_PID" 2>/dev/null || break; sleep 0.1; done; kill_pid "$CAP_PID"; }
counters() {  # counters LABEL: rxe hw counters of vm0 into <case>.counters
  { echo "== $1"; "$X" -t 20 0 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep -H . * | sed "s/:/ /"'; } >>"$OUT/$CASE.counters" 2>&1
}
droce_start() {  # droce_start pmd|probe ARGS... : droce in the netns, in the background, bounded by timeout
  local kind=$1; shift
  local cmd
  SEQ=$((SEQ + 1))
  if [ "$kind" = probe ]; then
    cmd=("$DROCE_PROBE" "$UIF" "$DROCE_MAC" "$DROCE_IP" "$VM0_MAC" -t $((TMO - 10)) "$@")
  else
    cmd=("$DROCE_PMD" --no-huge -m 512 --no-pci --no-shconf "--file-prefix=interop$$-$SEQ" "--vdev=net_af_packet0,iface=$UIF" ${EAL_EXTRA:-} -- "$@")
  fi
  echo "# ip netns exec $NS timeout -k 5 $TMO ${cmd[*]}" >"$OUT/$CASE.droce.log"
  ip netns exec "$NS" timeout -k 5 "$TMO" "${cmd[@]}" >>"$OUT/$CASE.droce.log" 2>&1 &
  DROCE_PID=$!; PIDS+=("$DROCE_PID")
}
droce_wait() { wait "$DROCE_PID"; DROCE_RC=$?; echo "# exit status $DROCE_RC" >>"$OUT/$CASE.droce.log"; }
droce_wait_listen() {  # droce_wait_listen TCPPORT|-: until droce listens on the netns TCP port (or 30 s)
  local n
  for n in $(seq 300); do
    kill -0 "$DROCE_PID" 2>/dev/null || return 1
    # rping (no TCP): droce-pmd opens its --pcap file once its port is up (it writes it only
    # at the end); else give EAL and the port 8 s
    if [ "$1" = - ]; then { [ -e "$OUT/$CASE.droce.pcap" ] || [ "$n" -ge 80 ]; } && { sleep 0.5; return 0; }
    else ip netns exec "$NS" ss -Hltn "sport = :$1" | grep -q LISTEN && return 0; fi
    sleep 0.1
  done
  [ "$1" = - ]   # for rping (no TCP) go on after 30 s anyway
}
vm_bg() {  # vm_bg CMD: run in vm0 in the background (bounded by timeout inside the VM)
  echo "# vm0# timeout -k 5 $TMO $*" >"$OUT/$CASE.vm.log"
  VM_JOB=$("$X" -b 0 "timeout -k 5 $TMO $*")
}
vm_wait() { "$X" -t $((TMO + 15)) -w "$VM_JOB" 0 >>"$OUT/$CASE.vm.log" 2>&1; VM_RC=$?; echo "# exit status $VM_RC" >>"$OUT/$CASE.vm.log"; }
vm_fg() {  # vm_fg CMD: run in vm0 and wait
  echo "# vm0# timeout -k 5 $TMO $*" >"$OUT/$CASE.vm.log"
  "$X" -t $((TMO + 15)) 0 "timeout -k 5 $TMO $*" >>"$OUT/$CASE.vm.log" 2>&1; VM_RC=$?
  echo "# exit status $VM_RC" >>"$OUT/$CASE.vm.log"
}
vm_wait_tcp() {  # vm_wait_tcp PORT: until a TCP listener in vm0 (or 30 s)
  local n; for n in $(seq 60); do "$X" -t 5 0 "ss -Hltn 'sport = :$1' | grep -q LISTEN" >/dev/null 2>&1 && return 0; sleep 0.3; done; return 1
}
vm_wait_cm() {  # until rdma_cm has a listening cm_id in vm0 (rping -s), or 30 s
  local n; for n in $(seq 60); do "$X" -t 5 0 "rdma res show cm_id | grep -q LISTEN" >/dev/null 2>&1 && return 0; sleep 0.3; done; return 1
}
# verdict from both exit statuses and the capture
verdict() {
  cap_stop
  "$DROCE_DUMP" "$OUT/$CASE.pcap" >"$OUT/$CASE.dump" 2>&1; local drc=$?
  local tx rx bad
  tx=$(grep -cF " $DROCE_IP -> " "$OUT/$CASE.dump")
  rx=$(grep -cF " -> $DROCE_IP " "$OUT/$CASE.dump")
  bad=$(grep -c 'icrc=bad' "$OUT/$CASE.dump")
  local frames="frames droce->rxe $tx, rxe->droce $rx, bad ICRC $bad"
  if [ "$DROCE_RC" != 0 ] || [ "$VM_RC" != 0 ]; then
    WHY="droce exit $DROCE_RC$( [ "$DROCE_RC" = 124 ] && echo ' (timeout)'), rxe tool exit $VM_RC$( [ "$VM_RC" = 124 ] && echo ' (timeout)'); $frames; last droce line: $(grep -v '^#' "$OUT/$CASE.droce.log" | tail -1 | cut -c1-160); last vm line: $(grep -v '^#' "$OUT/$CASE.vm.log" | tail -1 | cut -c1-160)"
    return 1
  fi
  if [ "$drc" != 0 ]; then WHY="droce-dump rejects the capture (exit $drc): $frames"; return 1; fi
  if [ "$tx" = 0 ] || [ "$rx" = 0 ]; then WHY="no RoCE frames in one direction on $BR: $frames"; return 1; fi
  WHY="$frames; $(summary_line)"
  return 0
}
summary_line() {  # the tool's own result line, for the PASS message
  grep -hE 'usec/iter|^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+|ping data|client DISCONNECT' "$OUT/$CASE.vm.log" "$OUT/$CASE.droce.log" 2>/dev/null | head -1 | tr -s ' \t' '  ' | cut -c1-120
}

# droce server + rxe client, and rxe server + droce client, generic for the TCP-exchange tools
#   pair_droce_server pmd|probe MODE "DROCE_ARGS" "VM_CMD_WITHOUT_SERVER"
#   (pmd: droce-pmd --test=MODE DROCE_ARGS --ip 192.168.77.2 -p 18515 [SERVER];
#    probe: droce-rxe-probe, an ibv_rc_pingpong peer only: MODE is ignored)
droce_args() {  # droce_args KIND MODE DARGS [SERVER]
  if [ "$1" = probe ]; then echo "$3 -p $TCP_PORT ${4:-}"
  else echo "--test=$2 $3 --ip $DROCE_IP -p $TCP_PORT --timeout $((TMO - 20)) --pcap $OUT/$CASE.droce.pcap ${4:-}"; fi
}
pair_droce_server() {
  local kind=$1 mode=$2 dargs=$3 vcmd=$4
  [ "$kind" = probe ] || need_mode "$mode" || return 2
  counters before; cap_start
  # shellcheck disable=SC2046
  droce_start "$kind" $(droce_args "$kind" "$mode" "$dargs")
  if ! droce_wait_listen $TCP_PORT; then
    kill_pid "$DROCE_PID"; droce_wait; VM_RC=-; WHY="droce did not listen on TCP $TCP_PORT (exit $DROCE_RC): $(grep -v '^#' "$OUT/$CASE.droce.log" | tail -1)"
    cap_stop; return 1
  fi
  vm_fg "$vcmd $HOST_TCP_IP"
  droce_wait; counters after
  verdict
}
pair_droce_client() {
  local kind=$1 mode=$2 dargs=$3 vcmd=$4
  [ "$kind" = probe ] || need_mode "$mode" || return 2
  counters before; cap_start
  vm_bg "$vcmd"
  vm_wait_tcp $TCP_PORT || log "$CASE: no TCP listener seen in vm0"
  # shellcheck disable=SC2046
  droce_start "$kind" $(droce_args "$kind" "$mode" "$dargs" $VM0_IP)
  droce_wait; vm_wait; counters after
  verdict
}

# ---- the cases --------------------------------------------------------------------------------
N=$ITERS
rcpp() { echo "ibv_rc_pingpong -d rxe0 -g $G -s $1 -n $N -e -p $TCP_PORT"; }
case_rc_pingpong_64_droce_server()   { pair_droce_server pmd rc_pingpong "-s 64 -n $N"   "$(rcpp 64)"; }
case_rc_pingpong_64_droce_client()   { pair_droce_client pmd rc_pingpong "-s 64 -n $N"   "$(rcpp 64)"; }
case_rc_pingpong_4096_droce_server() { pair_droce_server pmd rc_pingpong "-s 4096 -n $N" "$(rcpp 4096)"; }
case_rc_pingpong_4096_droce_client() { pair_droce_client pmd rc_pingpong "-s 4096 -n $N" "$(rcpp 4096)"; }
# UD: the size must fit the active MTU (1024 with the harness's default Ethernet MTU 1500)
udpp="ibv_ud_pingpong -d rxe0 -g $G -s 512 -n $N -e -p $TCP_PORT"
case_ud_pingpong_droce_server() { pair_droce_server pmd ud_pingpong "-s 512 -n $N" "$udpp"; }
case_ud_pingpong_droce_client() { pair_droce_client pmd ud_pingpong "-s 512 -n $N" "$udpp"; }
pt() { echo "$1 -d rxe0 -x $G -F -p $TCP_PORT ${*:2}"; }   # perftest common flags
case_send_lat_droce_server()  { pair_droce_server pmd send_lat  "-s 64 -n $N"    "$(pt ib_send_lat -s 64 -n $N)"; }
case_send_lat_droce_client()  { pair_droce_client pmd send_lat  "-s 64 -n $N"    "$(pt ib_send_lat -s 64 -n $N)"; }
case_write_bw_droce_server()  { pair_droce_server pmd write_bw  "-s 65536 -n $N" "$(pt ib_write_bw -s 65536 -n $N --report_gbits)"; }
case_write_bw_droce_client()  { pair_droce_client pmd write_bw  "-s 65536 -n $N" "$(pt ib_write_bw -s 65536 -n $N --report_gbits)"; }
case_read_lat_droce_server()  { pair_droce_server pmd read_lat  "-s 64 -n $N"    "$(pt ib_read_lat -s 64 -n $N)"; }
case_read_lat_droce_client()  { pair_droce_client pmd read_lat  "-s 64 -n $N"    "$(pt ib_read_lat -s 64 -n $N)"; }
# atomics: perftest's -A picks the operation; droce's flag for it (when droce is the client)
atomic_flag() {  # atomic_flag FETCH_AND_ADD|CMP_AND_SWAP -> droce-pmd argument, or fail (SKIP)
  if grep -qE -- '(^|[ ,\[])-A\b|--atomic' <<<"$DROCE_USAGE"; then echo "-A $1"; return 0; fi
  [ "$1" = FETCH_AND_ADD ] && { echo ""; return 0; }   # perftest's default is fetch-and-add
  return 1
}
atomic_case() {  # atomic_case server|client FETCH_AND_ADD|CMP_AND_SWAP
  local f
  need_mode atomic_lat || return 2
  if ! f=$(atomic_flag "$2"); then WHY="droce-pmd --test=atomic_lat has no option to choose $2 (perftest -A)"; return 2; fi
  pair_droce_"$1" pmd atomic_lat "-s 8 -n $N $f" "$(pt ib_atomic_lat -A "$2" -n $N)"
}
case_atomic_lat_fadd_droce_server()  { atomic_case server FETCH_AND_ADD; }
case_atomic_lat_fadd_droce_client()  { atomic_case client FETCH_AND_ADD; }
case_atomic_lat_cswap_droce_server() { atomic_case server CMP_AND_SWAP; }
case_atomic_lat_cswap_droce_client() { atomic_case client CMP_AND_SWAP; }
# rping: RDMA CM over QP1, no TCP. rping's client talks to droce's claimed IP directly.
RPING_COUNT=10
case_rping_droce_server() {
  need_mode rping || return 2
  counters before; cap_start
  droce_start pmd --test=rping -C $RPING_COUNT -v -V --ip $DROCE_IP -p $RPING_PORT --timeout $((TMO - 20)) --pcap "$OUT/$CASE.droce.pcap"
  droce_wait_listen - || { droce_wait; VM_RC=-; WHY="droce-pmd exited before listening (exit $DROCE_RC)"; cap_stop; return 1; }
  vm_fg "rping -c -a $DROCE_IP -p $RPING_PORT -C $RPING_COUNT -v -V"
  # rping's server side runs until the client disconnects; droce should exit after the DREQ
  droce_wait; counters after
  verdict
}
case_rping_droce_client() {
  need_mode rping || return 2
  counters before; cap_start
  vm_bg "rping -s -a $VM0_IP -p $RPING_PORT -C $RPING_COUNT -v -V"
  vm_wait_cm || log "$CASE: no rdma_cm listener seen in vm0"
  droce_start pmd --test=rping -C $RPING_COUNT -v -V --ip $DROCE_IP -p $RPING_PORT --timeout $((TMO - 20)) --pcap "$OUT/$CASE.droce.pcap" $VM0_IP
  droce_wait; vm_wait; counters after
  verdict
}
# ibv_rc_pingpong with 5 % loss on vm0's eth0 egress (netem inside the VM; rxe retransmits,
# droce must recover from lost SENDs and lost ACKs)
# vm0's neighbour entry for droce is pinned while netem runs: rxe resolves the peer MAC inside
# modify_qp(RTR) and gives up ("Failed to modify QP to RTR") when netem drops that one ARP
# exchange (seen once in CI); ARP itself is exercised by every loss-free case.
# One frame is exempt from the loss: rxe's ACK of droce's last SEND (opcode 0x11, AETH MSN =
# the iteration count). ibv_rc_pingpong has no closing handshake: once rxe has all its messages
# and all its own sends acknowledged it exits and destroys its QP, so when that one ACK is lost
# droce's retransmissions of its last SEND go unanswered and droce ends in RETRY_EXC_ERR. Any
# RC pair does the same (rxe<->rxe too): the outcome depends on one coin flip of netem, not on
# droce. Before this exemption the case failed in ~5 % of attempts (4 of 20 in five CI runs,
# 2026-11-24) and was re-run; with it the case is deterministic in outcome: every other frame
# of rxe, every other ACK included, still goes through netem. The filter reads IPv4 without
# options: BTH opcode at byte 28 of the IP header, the AETH's 24-bit MSN at 41..43.
netem_on()  {
  local msn; msn=$(printf '0x%08x' "$N")
  "$X" -t 20 0 "ip neigh replace $DROCE_IP lladdr $DROCE_MAC dev eth0 nud permanent &&
    tc qdisc replace dev eth0 root handle 1: prio bands 3 priomap 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 &&
    tc qdisc add dev eth0 parent 1:3 handle 30: netem loss 5% &&
    tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff \
      match u8 0x11 0xff at 28 match u32 $msn 0x00ffffff at 40 flowid 1:1" >>"$OUT/$CASE.vm-netem.log" 2>&1 && NETEM_ON=1
}
netem_off() { "$X" -t 20 0 "tc -s qdisc show dev eth0; tc -s filter show dev eth0; tc qdisc del dev eth0 root; ip neigh del $DROCE_IP dev eth0" >>"$OUT/$CASE.vm-netem.log" 2>&1; NETEM_ON=0; }
loss_case() {  # loss_case server|client [pmd|probe]
  local kind=${2:-pmd} r
  [ "$kind" = probe ] || need_mode rc_pingpong || return 2
  netem_on || { WHY="tc netem could not be set up in vm0: $(tail -1 "$OUT/$CASE.vm-netem.log")"; return 2; }
  pair_droce_"$1" "$kind" rc_pingpong "-s 64 -n $N" "$(rcpp 64)"; r=$?
  netem_off
  # netem's own line: "qdisc netem 30: parent 1:3 ... Sent B bytes P pkt (dropped D, ..."
  [ $r = 0 ] && WHY="$WHY; netem: $(grep -A1 'qdisc netem' "$OUT/$CASE.vm-netem.log" | grep -oE 'dropped [0-9]+' | head -1)"
  return $r
}
case_rc_pingpong_loss5_droce_server() { loss_case server; }
case_rc_pingpong_loss5_droce_client() { loss_case client; }
# the same ibv_rc_pingpong cases with droce's transport alone (droce-rxe-probe: the sans-IO
# Device over a raw socket, no DPDK): they separate transport bugs from engine/CLI bugs
case_transport_rc_pingpong_64_droce_server()   { pair_droce_server probe - "-s 64 -n $N"   "$(rcpp 64)"; }
case_transport_rc_pingpong_64_droce_client()   { pair_droce_client probe - "-s 64 -n $N"   "$(rcpp 64)"; }
case_transport_rc_pingpong_4096_droce_server() { pair_droce_server probe - "-s 4096 -n $N" "$(rcpp 4096)"; }
case_transport_rc_pingpong_4096_droce_client() { pair_droce_client probe - "-s 4096 -n $N" "$(rcpp 4096)"; }
case_transport_rc_pingpong_loss5_droce_server() { loss_case server probe; }
case_transport_rc_pingpong_loss5_droce_client() { loss_case client probe; }
case_transport_ud_pingpong_droce_server() { pair_droce_server probe - "--ud -s 512 -n $N" "$udpp"; }
case_transport_send_lat_droce_server() { pair_droce_server probe - "--perftest send_lat -s 64 -n $N" "$(pt ib_send_lat -s 64 -n $N)"; }
case_transport_send_lat_droce_client() { pair_droce_client probe - "--perftest send_lat -s 64 -n $N" "$(pt ib_send_lat -s 64 -n $N)"; }
case_transport_write_bw_droce_server() { pair_droce_server probe - "--perftest write_bw -s 65536 -n $N" "$(pt ib_write_bw -s 65536 -n $N --report_gbits)"; }
case_transport_write_bw_droce_client() { pair_droce_client probe - "--perftest write_bw -s 65536 -n $N" "$(pt ib_write_bw -s 65536 -n $N --report_gbits)"; }
case_transport_read_lat_droce_server()  { pair_droce_server probe - "--perftest read_lat -s 64 -n $N" "$(pt ib_read_lat -s 64 -n $N)"; }
case_transport_read_lat_droce_client()  { pair_droce_client probe - "--perftest read_lat -s 64 -n $N" "$(pt ib_read_lat -s 64 -n $N)"; }
case_transport_atomic_lat_fadd_droce_server()  { pair_droce_server probe - "--perftest atomic_fadd -n $N"  "$(pt ib_atomic_lat -A FETCH_AND_ADD -n $N)"; }
case_transport_atomic_lat_fadd_droce_client()  { pair_droce_client probe - "--perftest atomic_fadd -n $N"  "$(pt ib_atomic_lat -A FETCH_AND_ADD -n $N)"; }
case_transport_atomic_lat_cswap_droce_server() { pair_droce_server probe - "--perftest atomic_cswap -n $N" "$(pt ib_atomic_lat -A CMP_AND_SWAP -n $N)"; }
case_transport_atomic_lat_cswap_droce_client() { pair_droce_client probe - "--perftest atomic_cswap -n $N" "$(pt ib_atomic_lat -A CMP_AND_SWAP -n $N)"; }
case_transport_ud_pingpong_droce_client() { pair_droce_client probe - "--ud -s 512 -n $N" "$udpp"; }

# ---------------------------------------------------------------------------------------------
# run
SEL=()
if [ $# -eq 0 ]; then SEL=("${CASES[@]}"); else
  for c in "${CASES[@]}"; do for pat in "$@"; do
    # shellcheck disable=SC2053
    if [[ $c == $pat || $c == $pat* ]]; then SEL+=("$c"); break; fi
  done; done
  [ ${#SEL[@]} -gt 0 ] || { echo "no case matches: $* (see $0 -l)" >&2; exit 2; }
fi
pass=0 fail=0 skip=0
: >"$OUT/results.txt"
for CASE in "${SEL[@]}"; do
  WHY= DROCE_RC=- VM_RC=-
  ts=$SECONDS
  "case_$CASE"; r=$?
  case $r in
    0) v=PASS; pass=$((pass + 1));;
    2) v=SKIP; skip=$((skip + 1));;
    *) v=FAIL; fail=$((fail + 1));;
  esac
  line="$v $CASE: $WHY ($((SECONDS - ts)) s)"
  echo "$line" | tee -a "$OUT/results.txt"
done
echo "$pass passed, $fail failed, $skip skipped  (artefacts: $OUT; total $((SECONDS - t0)) s)" | tee -a "$OUT/results.txt"
[ $fail = 0 ]
exit
}
