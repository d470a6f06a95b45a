#!/usr/bin/env bash
# Benchmark (not a test): the droce libfabric provider (libdroce_fi.so, release build) between
# two processes over the zero-config memif pair, as ratios against the tcp provider over
# loopback measured in the same run, pairs alternating within every round:
#
#   fi msg 64 B     fi_pingpong -e msg latency, droce vs tcp                      target <= 0.3
#   fi rdm 64 B     fi_pingpong -e rdm latency, droce;ofi_rxm vs tcp;ofi_rxm      report
#   MPI 8 B         Open MPI pml cm / mtl ofi, half round trip, droce vs tcp      target <= 0.5
#   MPI 1 MiB       same jobs, osu_bw-style window bandwidth (MB = 1e6 B)         report
#
# The MPI program is tests/mpi/droce_mpi_pingpong.c (built here with mpicc.openmpi).
# fi_pingpong server pinned to CPU 0, client to CPU 1; mpirun binds its 2 ranks itself.
# Every process runs under `timeout`; every droce pair has its own DROCE_LINK and every
# fi_pingpong pair its own control port, so parallel runs do not collide.
#
# Usage: scripts/bench-fi.sh
# Env: FI_LIB=path to libdroce_fi.so (default: cargo build --release -p droce-fi),
#      ROUNDS (3), N_FI (fi_pingpong iterations, 5000), N_LAT (MPI 8 B iterations, 5000),
#      N_BW (MPI 1 MiB windows of 8, 20).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
if [ -z "${FI_LIB:-}" ]; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  cargo build --release -q -p droce-fi
  FI_LIB="$(realpath "${CARGO_TARGET_DIR:-target}")/release/libdroce_fi.so"
fi
[ -f "$FI_LIB" ] || { echo "bench-fi: $FI_LIB missing" >&2; exit 1; }
for t in fi_pingpong mpicc.openmpi mpirun.openmpi; do
  command -v $t >/dev/null || { echo "bench-fi: $t missing (apt-get install libfabric-bin openmpi-bin libopenmpi-dev)" >&2; exit 1; }
done
ROUNDS=${ROUNDS:-3}
N_FI=${N_FI:-5000}
N_LAT=${N_LAT:-5000}
N_BW=${N_BW:-20}
CPU_S=0
CPU_C=$(( $(nproc) > 1 ? 1 : 0 ))
TMP=$(mktemp -d /tmp/droce-bench-fi.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
  # the zero-config links this run named leave their lock files: remove those no process holds
  remove_free_locks /tmp/droce-"$(id -u)"/bfi$$*.lock
}
trap cleanup EXIT

# a private provider directory: libfabric loads every *fi.so in FI_PROVIDER_PATH
mkdir "$TMP/prov"
ln -s "$(realpath "$FI_LIB")" "$TMP/prov/libdroce-fi.so"
mpicc.openmpi -O2 -o "$TMP/pp" tests/mpi/droce_mpi_pingpong.c

DROCE_ENV="FI_PROVIDER_PATH=$TMP/prov FI_PROVIDER=droce"
TCP_ENV="FI_PROVIDER=tcp"
SEQ=0

# fipp NAME ENV PROV EP -> appends the client's usec/xfer at 64 B to $TMP/NAME.vals
fipp() {
  local name=$1 envs=$2 prov=$3 ep=$4
  SEQ=$((SEQ + 1))
  local port=$((20000 + (RANDOM % 20000))) link="bfi$$x$SEQ" out="$TMP/$name.$SEQ"
  env -u FI_PROVIDER_PATH $envs DROCE_LINK=$link taskset -c $CPU_S \
    timeout 120 fi_pingpong -p "$prov" -e "$ep" -S 64 -I "$N_FI" -B "$port" >"$out.s" 2>&1 &
  local sp=$!
  PIDS+=("$sp")
  sleep 1
  if env -u FI_PROVIDER_PATH $envs DROCE_LINK=$link taskset -c $CPU_C \
      timeout 120 fi_pingpong -p "$prov" -e "$ep" -S 64 -I "$N_FI" -P "$port" 127.0.0.1 >"$out" 2>&1; then
    awk '$1 == "64" && NF >= 8 { print $7 }' "$out" | tail -1 >>"$TMP/$name.vals"
  else
    echo "bench-fi: $name client failed:" >&2; tail -5 "$out" >&2
  fi
  wait "$sp" || { echo "bench-fi: $name server failed:" >&2; tail -5 "$out.s" >&2; }
}

# mpi NAME EXTRA-MPIRUN-ARGS... -> appends lat8 to NAME.lat.vals, bw1m to NAME.bw.vals
mpi() {
  local name=$1
  shift
  SEQ=$((SEQ + 1))
  local out="$TMP/$name.$SEQ"
  if timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --mca pml cm --mca mtl ofi \
      --mca mtl_ofi_verbose 1 "$@" "$TMP/pp" -n "$N_LAT" -b "$N_BW" >"$out" 2>&1; then
    awk '$1 == "lat8" { print $2 }' "$out" >>"$TMP/$name.lat.vals"
    awk '$1 == "bw1m" { print $2 }' "$out" >>"$TMP/$name.bw.vals"
    grep -o 'mtl:ofi:prov: [^ ]*' "$out" | sort -u | sed 's/.*: //' >"$TMP/$name.prov"
  else
    echo "bench-fi: MPI $name failed:" >&2; tail -8 "$out" >&2
  fi
}

echo "# droce libfabric provider vs tcp over loopback, $(date -u '+%Y-%m-%d %H:%M UTC'), ROUNDS=$ROUNDS"
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(fi_info --version | tr '\n' ' ')"
echo "# provider: $(realpath "$FI_LIB")"
for r in $(seq 1 "$ROUNDS"); do
  echo "# round $r start $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
  cut -d' ' -f1 /proc/loadavg >>"$TMP/load.vals"
  fipp msg_droce "$DROCE_ENV" droce msg
  fipp msg_tcp "$TCP_ENV" tcp msg
  fipp rdm_droce "$DROCE_ENV" "droce;ofi_rxm" rdm
  fipp rdm_tcp "$TCP_ENV" "tcp;ofi_rxm" rdm
  mpi mpi_droce -x FI_PROVIDER=droce -x FI_PROVIDER_PATH="$TMP/prov" -x DROCE_LINK="bfi$$mpi$r"
  mpi mpi_tcp -x FI_PROVIDER=tcp --mca mtl_ofi_provider_exclude shm
  cut -d' ' -f1 /proc/loadavg >>"$TMP/load.vals"
done
echo "# end $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"

prov() { [ -s "$TMP/$1.prov" ] && tr '\n' ' ' <"$TMP/$1.prov" | sed 's/ $//' || echo "?"; }
row() { # LABEL DROCE TCP TARGET UNIT
  printf "| %s | %s %s | %s %s | %s | %s |\n" "$1" "$(spread "$2")" "$5" "$(spread "$3")" "$5" "$(ratio "$(med "$2")" "$(med "$3")")" "$4"
}
echo
echo "load average (1 min) over the run: $(spread load)"
echo
printf "| test (median, min-max) | droce | tcp over lo | ratio of medians | target |\n|---|---|---|---|---|\n"
row "fi_pingpong msg 64 B, usec/xfer" msg_droce msg_tcp "<= 0.3" us
row "fi_pingpong rdm 64 B (x;ofi_rxm), usec/xfer" rdm_droce rdm_tcp report us
row "Open MPI cm/ofi 8 B half round trip ($(prov mpi_droce) vs $(prov mpi_tcp))" mpi_droce.lat mpi_tcp.lat "<= 0.5" us
row "Open MPI cm/ofi 1 MiB bandwidth, window 8" mpi_droce.bw mpi_tcp.bw "report (higher is better)" MB/s
