# Shared helpers of the benchmark and test scripts (sourced, not run).

# median: the median of the numbers on stdin, "-" when there are none
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# med NAME: the median of $TMP/NAME.vals; spread NAME: "median (min-max, n=K)", "-" when empty
med() { median <"$TMP/$1.vals" 2>/dev/null || echo "-"; }
spread() {
  [ -s "$TMP/$1.vals" ] || { echo "-"; return; }
  sort -g "$TMP/$1.vals" | awk -v m="$(med "$1")" '{ v[NR] = $1 } END { printf "%s (%s-%s, n=%d)", m, v[1], v[NR], NR }'
}
# ratio A B: A/B to two decimals, "-" when either is missing or B is 0
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
# remove_free_locks FILE...: remove the zero-config link lock files (/tmp/droce-<uid>/*.lock) that
# no process holds, taking the lock while removing; held ones stay
remove_free_locks() {
  local f
  for f in "$@"; do
    [ -e "$f" ] && { flock -n "$f" rm -f "$f" || true; }
  done
}
