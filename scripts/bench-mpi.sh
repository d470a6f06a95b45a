#!/usr/bin/env bash
# Benchmark (not a test): MPI bandwidth and latency over droce against MPI over kernel TCP, two
# ranks on this machine, 1 B to 16 MiB (tests/mpi/droce_mpi_bw.c: osu_latency-style ping-pong
# and osu_bw-style streaming windows, own code built with mpicc), under
#   Open MPI:  pml cm + mtl ofi over droce;ofi_rxm (libdroce-fi.so)   vs  pml ob1 + btl tcp,self
#   MPICH:     ch4:ucx over droce_rc,droce_ud (libuct_droce.so)      vs  UCX_TLS=tcp,self
# The droce ranks use the zero-config memif pair (a private DROCE_LINK per job). Each round runs
# droce then TCP for one MPI, then the other MPI, so every pair of figures is measured minutes
# apart at most; per size the table gives the medians over ROUNDS and the ratio droce/TCP of
# the per-round pairs (median and min-max).
#
# Usage: scripts/bench-mpi.sh
# Env: ROUNDS (3), MPIS ("openmpi mpich"), MIN (1), MAX (16777216), BUDGET (MB per size and
#      phase, 256), FI_LIB / UCT_LIB (default: release builds), BW_SRC (the benchmark's source,
#      default tests/mpi/droce_mpi_bw.c; another version to compare with)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
ROUNDS=${ROUNDS:-3}
MPIS=${MPIS:-openmpi mpich}
MIN=${MIN:-1}
MAX=${MAX:-16777216}
BUDGET=${BUDGET:-256}
BW_SRC=${BW_SRC:-tests/mpi/droce_mpi_bw.c}
TMP=$(mktemp -d /tmp/droce-bench-mpi.XXXXXX)
cleanup() {
  rm -rf "$TMP"
  remove_free_locks /tmp/droce-"$(id -u)"/bmpi$$*.lock
}
trap cleanup EXIT
if [[ " $MPIS " == *" openmpi "* ]] && [ -z "${FI_LIB:-}" ]; then
  cargo build --release -q -p droce-fi
  FI_LIB="$(realpath "${CARGO_TARGET_DIR:-target}")/release/libdroce_fi.so"
fi
if [[ " $MPIS " == *" mpich "* ]] && [ -z "${UCT_LIB:-}" ]; then
  scripts/setup-ucx-src.sh
  cargo build --release -q -p droce-ucx
  UCT_LIB="$(realpath "${CARGO_TARGET_DIR:-target}")/release/libuct_droce.so"
fi
# libfabric loads every *fi.so in FI_PROVIDER_PATH: a private directory with just droce's
if [ -n "${FI_LIB:-}" ]; then
  mkdir "$TMP/prov"
  ln -s "$(realpath "$FI_LIB")" "$TMP/prov/libdroce-fi.so"
fi
ARGS=(-min "$MIN" -max "$MAX" -budget "$BUDGET" -timeout 900)
SEQ=0

# job NAME MPI -> $TMP/NAME.<round> holds "size lat bw" lines
job() {
  local name=$1 mpi=$2 r=$3 out="$TMP/$1.$3.out"
  SEQ=$((SEQ + 1))
  local link="bmpi$$x$SEQ" cmd
  case "$name" in
    ompi_droce) cmd=(mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --mca pml cm --mca mtl ofi
                     -x FI_PROVIDER=droce -x FI_PROVIDER_PATH="$TMP/prov" -x DROCE_LINK="$link" "$TMP/bw.openmpi") ;;
    ompi_tcp)   cmd=(mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --mca pml ob1 --mca btl tcp,self "$TMP/bw.openmpi") ;;
    mpich_droce) cmd=(mpiexec.mpich -n 2 -genv LD_PRELOAD "$UCT_LIB" -genv UCX_TLS droce_rc,droce_ud,self
                      -genv DROCE_LINK "$link" "$TMP/bw.mpich") ;;
    mpich_tcp)  cmd=(mpiexec.mpich -n 2 -genv UCX_TLS tcp,self "$TMP/bw.mpich") ;;
  esac
  if timeout 1000 "${cmd[@]}" "${ARGS[@]}" >"$out" 2>&1; then
    awk '$1 == "size" { print $2, $4, $6 }' "$out" >"$TMP/$name.$r"
  else
    echo "bench-mpi: $name (round $r) failed:" >&2; tail -8 "$out" >&2
    : >"$TMP/$name.$r"
  fi
}

for m in $MPIS; do
  mpicc.$m -O2 -o "$TMP/bw.$m" "$BW_SRC"
done
echo "# MPI over droce vs MPI over TCP, 2 ranks, $(date -u '+%Y-%m-%d %H:%M UTC'), HEAD $(git rev-parse --short HEAD 2>/dev/null || echo -), ROUNDS=$ROUNDS, BUDGET=$BUDGET, $BW_SRC"
echo "# $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
for ((r = 1; r <= ROUNDS; r++)); do
  for m in $MPIS; do
    p=$([ "$m" = openmpi ] && echo ompi || echo mpich)
    echo "# round $r $m start $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
    job "${p}_droce" "$m" "$r"
    job "${p}_tcp" "$m" "$r"
  done
done
echo "# end $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"

# per MPI: one table, rows = sizes; medians over rounds and the per-round ratio's median (min-max)
for m in $MPIS; do
  p=$([ "$m" = openmpi ] && echo ompi || echo mpich)
  echo
  echo "## $m: droce vs tcp (bandwidth MB/s = 1e6 B/s, latency us = half round trip)"
  echo
  echo "| size | droce MB/s | tcp MB/s | droce/tcp bw, median (min-max) | droce lat us | tcp lat us | droce/tcp lat |"
  echo "|---|---|---|---|---|---|---|"
  s=$MIN
  while [ "$s" -le "$MAX" ]; do
    : >"$TMP/bd"; : >"$TMP/bt"; : >"$TMP/br"; : >"$TMP/ld"; : >"$TMP/lt"; : >"$TMP/lr"
    for ((r = 1; r <= ROUNDS; r++)); do
      d=$(awk -v s="$s" '$1 == s { print $2, $3 }' "$TMP/${p}_droce.$r" 2>/dev/null)
      t=$(awk -v s="$s" '$1 == s { print $2, $3 }' "$TMP/${p}_tcp.$r" 2>/dev/null)
      [ -n "$d" ] && { echo "${d#* }" >>"$TMP/bd"; echo "${d% *}" >>"$TMP/ld"; }
      [ -n "$t" ] && { echo "${t#* }" >>"$TMP/bt"; echo "${t% *}" >>"$TMP/lt"; }
      if [ -n "$d" ] && [ -n "$t" ]; then
        { ratio "${d#* }" "${t#* }"; echo; } >>"$TMP/br"
        { ratio "${d% *}" "${t% *}"; echo; } >>"$TMP/lr"
      fi
    done
    sp() { [ -s "$1" ] && sort -g "$1" | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s (%s-%s)", m, v[1], v[NR] }' || echo -; }
    printf "| %s | %s | %s | %s | %s | %s | %s |\n" "$s" "$(median <"$TMP/bd")" "$(median <"$TMP/bt")" "$(sp "$TMP/br")" \
      "$(median <"$TMP/ld")" "$(median <"$TMP/lt")" "$(sp "$TMP/lr")"
    s=$((s * 2))
  done
done
