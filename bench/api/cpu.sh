# Sourced by bench/api/run and bench/api/ab: where the CPU goes.

# Clock ticks (1/CLK_TCK s) used so far by a process (`own`: utime + stime) or by the
# children it has waited for (`reaped`: cutime + cstime), from /proc/<pid>/stat.
ticks() { # pid own|reaped
  awk -v w="$2" '{ sub(/.*\) /, ""); print (w == "own") ? $12 + $13 : $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}
# Postgres: every live server process plus the backends the postmaster has reaped (pgbench's
# sessions end with its run), so a delta over a run counts both sides' backends.
pg_ticks() {
  local pm total p
  pm=$(pgrep -o -x postgres)
  total=$(ticks "$pm" reaped)
  for p in $(pgrep -x postgres); do total=$(( total + $(ticks "$p" own) )); done
  echo "$total"
}
