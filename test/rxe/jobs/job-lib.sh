# Sourced by the guest jobs of test/rxe (from the shared build tree):
# time stamps, steps with PASS/FAIL and a summary, and local port checks.
# The job sets STEPS (the steps it runs) before calling want.

now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }
log() { echo "[job $(now)s] $*"; }

results=() fail=0
step() { # name, command...
  local name=$1; shift
  local t0; t0=$(now)
  echo
  log "=== $name"
  "$@"; local rc=$?
  local r=PASS; [ $rc = 0 ] || { r=FAIL; fail=$((fail + 1)); }
  results+=("$r $name ($(since "$t0") s)")
  log "$r $name (rc $rc, $(since "$t0") s)"
}
want() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
summary() { # title; the exit status: 0 when every step passed
  echo
  log "===== SUMMARY ($1)"
  local r
  for r in "${results[@]}"; do echo "  $r"; done
  echo "  ${#results[@]} steps, $fail failed"
  [ $fail = 0 ]
}

listening() { # port: is a TCP socket listening on it?
  local hex f files=()
  hex=$(printf '%04X' "$1")
  for f in /proc/net/tcp /proc/net/tcp6; do [ -r $f ] && files+=("$f"); done
  awk -v p=":$hex" 'FNR > 1 && substr($2, length($2) - 4) == p && $4 == "0A" {f = 1}
                    END {exit !f}' "${files[@]}"
}
# wait_listen port pid seconds: until the port listens; fails when the
# process pid ends first or the time is up
wait_listen() {
  local deadline=$(( $(date +%s) + $3 ))
  until listening "$1"; do
    kill -0 "$2" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# Two guests (run-rxe-two-hosts.sh) meet through marker files in RUN, a
# directory of the build tree both share: mark NAME says this guest
# (ROLE a or b) reached NAME; await NAME [seconds] waits for the other's.
mark() { : > "$RUN/$ROLE.$1"; }
await() {
  local other=a deadline=$(( $(date +%s) + ${2:-$((60 * ${RXE_TIME_SCALE:-1}))} ))
  [ "$ROLE" = a ] && other=b
  until [ -e "$RUN/$other.$1" ]; do
    if [ "$(date +%s)" -ge "$deadline" ] || [ -e "$RUN/$other.gone" ]; then
      log "guest $other never reached $1"
      return 1
    fi
    sleep 0.1
  done
}

# awk functions for the benchmarks' tables, put before a program that
# keeps n[k] values of key k in a[k, 1..n[k]]: med(k, a) their median
# ("nan" when none), ratio(x, y, fmt) x / y ("n/a" when either is nan or
# y is 0)
AWK_MEDIANS='
function med(k, a,   i, j, t, v, c) {
  c = n[k]; if (!c) return "nan"
  for (i = 1; i <= c; i++) v[i] = a[k, i] + 0
  for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
  return v[int((c + 1) / 2)]
}
function ratio(x, y, f) { return (x == "nan" || y == "nan" || y == 0) ? "n/a" : sprintf(f, x / y) }
'
