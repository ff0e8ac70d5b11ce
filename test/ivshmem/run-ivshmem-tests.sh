#!/bin/bash
# Inter-VM shared memory between two qemu guests, in two steps; each boots
# two guests of test/rxe's image at once (run-guest.sh) and streams their
# consoles to stdout, prefixed a| and b|.
#
# plain: qemu's ivshmem-plain PCI device (1af4:1110) in each guest, both
#   on one host file in /dev/shm (made here under a unique name, removed
#   at exit; run-guest.sh -I). Both run jobs/pair.sh: each finds the
#   device in sysfs (ivshmem_probe, built here with cc), reads its
#   IVPosition and the string the host wrote at offset 0; guest a writes a
#   string at 4096 and waits for guest b's answer at 8192, guest b waits
#   for a's string and answers. Meanwhile the host watches the file for
#   a's string, and at the end reads both strings through the file.
# ntx: ntx between the guests over the ivshmem domain. The host starts
#   test/ivshmem/ntx_ivshmem_server (its socket and pidfile in a private
#   temporary directory; a 64M region, 1 vector) and boots the guests with
#   the ivshmem-DOORBELL device on it (run-guest.sh -D) and a virtio NIC
#   each, the two joined by a qemu socket netdev over host loopback as in
#   test/rxe/run-rxe-two-hosts.sh (fi_pingpong's out-of-band TCP and the
#   suite's peer service use it); both share this build tree at the same
#   path and run jobs/ntx.sh on the domain ivshmem-BDF (the device's PCI
#   address, from ivshmem_probe list): fi_info lists it; fi_pingpong -e
#   rdm -c, tagged and msg, at 8, 1024, 65536 and 1048576 bytes (and -e
#   msg where fi_info lists FI_EP_MSG on the domain); a host process and
#   guest a ping-pong through the region (hostpp_answer: the client here
#   on the domain ivshmem-host, its control connection to guest a through
#   qemu's user network, hostpp_fwds); the functional
#   suite's two-process tests (test/rxe's five) with each test's peer in
#   the other guest; Open MPI with one rank in each guest (test/mpi/mpi_msg,
#   built here, over the ofi MTL on the ivshmem domain; mpirun, orted and
#   Open MPI's and PMIx's components are put in the image, mpi_image);
#   then guest b writes random words all over the
#   region (ivshmem_probe scribble) while two processes of guest a
#   exchange messages through it (the suite's
#   pci/garbage_from_another_machine_crashes_and_hangs_nobody): both end
#   normally, and guest b zeroes the region for what follows; a
#   benchmark, fi_pingpong over the ivshmem domain against ntx's tcp
#   domain and tcp;ofi_rxm on the guests' virtio-net link (guest b's table
#   is repeated at the end); last,
#   guest b serves two fi_pingpong streams (-e
#   rdm and -e msg) while guest a is their client, the host kills guest
#   b's qemu two seconds into them (SIGKILL to the PID qemu wrote,
#   run-guest.sh -q), and each of guest a's fi_pingpong must end with an
#   error within IVSHMEM_KILL_BOUND seconds. Guest b's status is the one
#   it wrote before it was killed. The fi_pingpong table of guest a (the
#   server) is repeated at the end.
# Needs what test/rxe needs (its image, made on first use; root or sudo
# for apt-get only then); step ntx needs the build tree built (the
# provider, test/func/test_func, test/ivshmem/ntx_ivshmem_server; made
# here when missing).
#
# Environment: RXE_VM_DIR, RXE_FORCE_TCG and RXE_TIME_SCALE as for
# test/rxe, and
#   IVSHMEM_STEPS    of: plain ntx (default both, in that order)
#   IVSHMEM_TIMEOUT  bound of each guest's qemu in step plain, seconds
#                    (default 360 under TCG, 120 with KVM)
#   IVSHMEM_WAIT     how long a guest of step plain waits for the other's
#                    string, seconds (default 240 under TCG, 60 with KVM);
#                    the guests boot together, so this covers the other's
#                    boot
#   IVSHMEM_SIZE     step plain's shared memory, a power of two (default 16M)
#   IVSHMEM_NTX_TIMEOUT bound of each guest's qemu in step ntx, seconds
#                    (default 1800 under TCG, 600 with KVM: about 400 s
#                    quiet under TCG; beside the other guest tiers and
#                    busy loops, load 12 to 15, the steps before the
#                    benchmark alone took 600)
#   IVSHMEM_NTX_SIZE step ntx's region (default 64M: 31 endpoints of 2 MiB)
#   IVSHMEM_PIN=1    step ntx: guest a's qemu on host CPU 0, guest b's on 1
#   IVSHMEM_NTX_STEPS, IVSHMEM_FUNC_FILTER, IVSHMEM_PP_ITERS,
#   IVSHMEM_PP_SIZES, IVSHMEM_KILL_BOUND, IVSHMEM_KILL_EPS,
#   IVSHMEM_BENCH_SIZES, IVSHMEM_BENCH_REPEAT, FI_LOG_LEVEL, FI_LOG_PROV:
#                    for the guests of step ntx (jobs/ntx.sh)
#   CC               the compiler of ivshmem_probe (default cc)
# Exit status: 0 when every step passed; else the first failing step's:
# the failing guest's (124: its qemu timed out, 125: it never reported; a
# guest that fails ends the other at once: the first one's), 1 when the
# host's check or preparing failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
rxe=$top/test/rxe
export RXE_VM_DIR=${RXE_VM_DIR:-/var/tmp/rxe-vm}
vm=$RXE_VM_DIR
say() { echo "run-ivshmem-tests: $*"; }
. "$rxe/rxe-host.sh"
steps=${IVSHMEM_STEPS:-plain ntx}

pids=() tails=() watcher='' work='' shm='' server='' priv='' run=''
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM -- -"$p" 2>/dev/null; done   # our guests' sessions
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null
  [ -n "$server" ] && kill "$server" 2>/dev/null
  wait
  [ -n "$shm" ] && rm -f "$shm"
  [ -n "$work" ] && rm -rf "$work"
  [ -n "$priv" ] && rm -rf "$priv"
  [ -n "$run" ] && rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

rxe_image_ready || exit 1
rxe_accel   # accel, scale
if [ "$accel" = kvm ]; then
  tmo=${IVSHMEM_TIMEOUT:-120} wait_s=${IVSHMEM_WAIT:-60} ntx_tmo=${IVSHMEM_NTX_TIMEOUT:-600}
else
  tmo=${IVSHMEM_TIMEOUT:-360} wait_s=${IVSHMEM_WAIT:-240} ntx_tmo=${IVSHMEM_NTX_TIMEOUT:-1800}
fi
size=$(numfmt --from=iec "${IVSHMEM_SIZE:-16M}") || exit 1
ntx_size=$(numfmt --from=iec "${IVSHMEM_NTX_SIZE:-64M}") || exit 1

# the probe, at the same path in the guests (run-guest.sh -b)
work=$(mktemp -d "$vm/ivshmem.XXXXXX") || exit 1
probe=$work/ivshmem_probe
"${CC:-cc}" -O2 -Wall -Wextra -o "$probe" "$here/ivshmem_probe.c" ||
  { say "cannot build ivshmem_probe"; exit 1; }
find "$vm/logs" -name 'ivshmem-*.log' -mtime +7 -delete 2>/dev/null
tier_start=$SECONDS

# a guest's console, prefixed with its role, while run-guest.sh (pid) runs
console() { # role, log, pid
  tail -n +1 -F --pid="$3" "$2" 2>/dev/null | sed -u "s/^/$1| /" &
  tails+=($!)
}
# what a guest's log says at its end
summaries() { # log prefix, the guest that was ended for the other (or '')
  local r l
  for r in a b; do
    l=$1-$r.log
    sed -n '/===== SUMMARY/,/===== JOB OUTPUT END/p' "$l" | grep -v 'JOB OUTPUT END' | sed "s/^/  $r| /"
    grep -q '===== SUMMARY' "$l" && continue
    if [ "$r" = "$2" ]; then say "guest $r: ended before its summary"; continue; fi
    say "guest $r never got to its summary:"; tail -n 30 "$l" | sed "s/^/  $r| /"
  done
}

# ---- step plain ---------------------------------------------------------------
# The guest that ended first (its pid and status), then the other: a
# guest that failed ends the other, which would wait for it in vain,
# unless it is guest b and $3 is yes (killed on purpose). Sets the
# caller's rca, rcb and ended (the guest ended for the other).
guests_settle() { # first pid, its status, b killed (yes or '')
  local first=$1 rc=$2 other
  if [ "$first" = "${pids[0]}" ]; then rca=$rc other=${pids[1]}; else rcb=$rc other=${pids[0]}; fi
  if [ "$rc" != 0 ] && ! { [ "$first" = "${pids[1]}" ] && [ "$3" = yes ]; }; then
    if [ "$other" = "${pids[1]}" ]; then ended=b; else ended=a; fi
    say "guest $([ $ended = a ] && echo b || echo a) failed (exit $rc): ending guest $ended"
    kill -TERM -- -"$other" 2>/dev/null
  fi
  wait "$other"; rc=$?
  if [ "$other" = "${pids[1]}" ]; then rcb=$rc; else rca=$rc; fi
  pids=()
}

plain_step() {
  local stamp start nonce host_msg msg_a msg_b first rc rca='' rcb='' ended='' rch
  local guests_s logs
  # the shared memory: a fresh file, so that nothing in it is left from
  # before; the strings carry this run's nonce
  shm=$(mktemp /dev/shm/ntx-ivshmem-XXXXXX) || return 1
  truncate -s "$size" "$shm" || return 1
  nonce=$$-$RANDOM-$(date +%s)
  host_msg="ntx-ivshmem host $nonce"
  msg_a="ntx-ivshmem a $nonce"
  msg_b="ntx-ivshmem b answers $nonce"
  "$probe" write --file "$shm" 0 "$host_msg" > /dev/null || return 1

  stamp=$(date +%Y%m%d-%H%M%S)-$$
  logs=$vm/logs/ivshmem-$stamp
  say "step plain: qemu $accel, time-out ${tmo}s each, guests wait ${wait_s}s for each other"
  say "shared memory $shm ($size bytes); console logs $logs-{a,b}.log"
  start=$SECONDS

  # the host sees guest a's string while the guests run
  "$probe" read --file "$shm" 4096 128 --wait-for "$msg_a" --timeout "$tmo" \
    > "$work/watch.out" 2>&1 &
  watcher=$!

  plain_guest() { # role
    local log=$logs-$1.log
    # a session of its own: ending it ends run-guest.sh, which ends its qemu
    setsid -w "$rxe/run-guest.sh" -t "$tmo" -l "$log" -c 1 -m 1G -I "$shm" \
      -b "$probe" -f "$rxe/jobs/job-lib.sh:/job-lib.sh" \
      -e "ROLE=$1" -e "PROBE=$probe" -e "HOST_MSG=$host_msg" -e "MSG_A=$msg_a" \
      -e "MSG_B=$msg_b" -e "IV_SIZE=$size" -e "IV_WAIT=$wait_s" "$here/jobs/pair.sh" \
      < /dev/null 2> >(grep --line-buffered -v '^host: qemu exit' >&2) &
    pids+=($!)
    console "$1" "$log" $!
  }
  plain_guest a
  plain_guest b

  # a guest that failed ends the other, which would wait for it in vain
  wait -n -p first "${pids[0]}" "${pids[1]}"; rc=$?
  guests_settle "$first" "$rc" ''
  guests_s=$((SECONDS - start))

  # the host's side: a's string seen while the guests ran, and both
  # strings in the file now
  host_check() {
    local ok=0
    if wait "$watcher"; then
      say "host: saw guest a's string in $shm while the guests ran"
    else
      say "host: never saw guest a's string while the guests ran:"; cat "$work/watch.out"; ok=1
    fi
    watcher=
    "$probe" read --file "$shm" 0 128 --wait-for "$host_msg" --timeout 0 || ok=1
    "$probe" read --file "$shm" 4096 128 --wait-for "$msg_a" --timeout 0 || ok=1
    "$probe" read --file "$shm" 8192 128 --wait-for "$msg_b" --timeout 0 || ok=1
    return $ok
  }
  if [ "$rca" = 0 ] && [ "$rcb" = 0 ]; then
    host_check > "$work/host.out" 2>&1; rch=$?   # not in a pipe: it waits for the watcher
    watcher=
    sed 's/^/host| /' "$work/host.out"
  else
    kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null; watcher=; rch=skipped
  fi

  wait "${tails[@]}"; tails=()   # the console tails
  summaries "$logs" "$ended"
  rm -f "$shm"; shm=
  local result=PASS
  [ "$rca" = 0 ] && [ "$rcb" = 0 ] && [ "$rch" = 0 ] || result=FAIL
  say "step plain $result: guest a exit $rca, guest b exit $rcb, host check $rch; qemu $accel; guests ${guests_s} s, $((SECONDS - start)) s in all"
  # the guest that failed first, not the one ended for it
  [ "$ended" = a ] && return "$rcb"
  [ "$ended" = b ] && return "$rca"
  [ "$rca" = 0 ] || return "$rca"
  [ "$rcb" = 0 ] || return "$rcb"
  [ "$rch" = 0 ] || return 1
  return 0
}

# ---- step ntx -----------------------------------------------------------------
# a free port on host loopback for the guests' link
port_taken() { # port
  awk -v p=":$(printf '%04X' "$1")" 'FNR > 1 && substr($2, length($2) - 4) == p {f = 1}
    END {exit !f}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# guest b's qemu, from the PID it wrote (run-guest.sh -q): SIGKILL
kill_guest_b() {
  local q
  q=$(cat "$priv/qemu-b.pid" 2>/dev/null)
  case $q in ''|*[!0-9]*) say "guest b's qemu wrote no PID"; return 1;; esac
  case $(cat "/proc/$q/comm" 2>/dev/null) in
    qemu-system*) ;;
    *) say "PID $q (guest b's qemu) is not a qemu"; return 1;;
  esac
  kill -KILL "$q"
}
# guest a's fi_pingpong tables: each row with the mode of its run
pp_table() { # guest a's log
  awk '/server: fi_pingpong/ {
         e = m = ""
         for (i = 1; i <= NF; i++) { if ($i == "-e") e = $(i + 1); if ($i == "-m") m = $(i + 1) }
         mode = e (m == "" ? "" : " " m) }
       /bytes +#sent +#ack/ && !hdr { sub(/^ +/, ""); printf "  %-11s %s\n", "", $0; hdr = 1 }
       $3 ~ /^=[0-9]+[kmb]?$/ { sub(/^ +/, ""); printf "  %-11s %s\n", mode, $0 }' "$1"
}

# Open MPI in the guests (their step mpi): test/mpi/mpi_msg built here,
# and mpirun, orted, Open MPI's and PMIx's components and data files and
# the libraries all of them need that the image lacks, copied once into a
# tree of their paths (work/mpi), which run-guest.sh -f puts in both
# guests' images as it is (one pass of ldd here, not one per guest: with
# -b for each of some 150 components, preparing a guest took 30 s on a
# quiet machine and over a minute at load 12). Fills mpi_adds and adds
# MPI_BIN to envs. Nothing when the guests' steps leave mpi out; when this
# host has no Open MPI, the guests get no MPI_BIN and their step mpi
# fails.
mpi_adds=()
mpi_stage() { # files: each, and the libraries it needs that the image lacks, into work/mpi
  local f lib
  for f; do
    [ -e "$f" ] || continue
    case $f in
      "$top"/*) ;;   # in the shared tree (mpi_msg): only its libraries
      *) mkdir -p "$work/mpi$(dirname "$f")" && cp -L "$f" "$work/mpi$f" || return 1;;
    esac
    while read -r lib; do
      [ -e "$vm/root$lib" ] || [ -e "$work/mpi$lib" ] && continue
      mkdir -p "$work/mpi$(dirname "$lib")" && cp -L "$lib" "$work/mpi$lib" || return 1
    done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} /^\t\/lib64/ {print $1}')
  done
}
mpi_image() {
  local d
  mpi_adds=()
  case " ${IVSHMEM_NTX_STEPS:-mpi} " in *" mpi "*) ;; *) return 0;; esac
  if ! command -v mpicc > /dev/null || ! [ -x /usr/bin/orterun ] ||
     ! mpicc -O2 -Wall -o "$run/mpi_msg" "$top/test/mpi/mpi_msg.c"; then
    say "no Open MPI here to build test/mpi/mpi_msg with (mpicc, orterun): the guests' step mpi fails"
    return 0
  fi
  rm -rf "$work/mpi"
  mpi_stage /usr/bin/orterun /usr/bin/orted /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so \
    /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so || { say "cannot copy Open MPI for the guests"; return 1; }
  mpi_stage "$run/mpi_msg" || return 1
  for d in /usr/share/openmpi /etc/openmpi /usr/lib/x86_64-linux-gnu/pmix2/share; do
    [ -d "$d" ] && { mkdir -p "$work/mpi$(dirname "$d")" && cp -a "$d" "$work/mpi$d" || return 1; }
  done
  envs+=(-e "MPI_BIN=$run/mpi_msg")
  for d in "$work/mpi"/*; do mpi_adds+=(-f "$d:/${d##*/}"); done
}

# step host of the guests: guest a's ports HOST_PORTS (jobs/ntx.sh)
# reached from host loopback at hostpp_ports (free ones, found here)
host_ports=(47900 47901 47902 47903) hostpp_ports=() hostpp_n=0
hostpp_fwds() { # run-guest.sh -U's hostfwd options, in hostfwd
  local i p=$((20000 + RANDOM % 20000)) out=''
  hostpp_ports=()
  for ((i = 0; i < ${#host_ports[@]}; i++)); do
    while port_taken $p; do p=$((p + 1)); done
    hostpp_ports+=($p)
    out+="${out:+,}hostfwd=tcp:127.0.0.1:$p-10.0.2.15:${host_ports[i]}"
    p=$((p + 1))
  done
  hostfwd=$out
}
# guest a's next request (RUN/a.hostpp-N: "port size iterations"), if
# any: the client here, on the domain ivshmem-host of the server's
# socket; its status and output go to RUN/host.hostpp-N
hostpp_answer() {
  local req=$run/a.hostpp-$((hostpp_n + 1)) gp size it hp i rc
  [ -e "$req" ] || return 0
  hostpp_n=$((hostpp_n + 1))
  read -r gp size it < "$req"
  for ((i = 0; i < ${#host_ports[@]}; i++)); do [ "${host_ports[i]}" = "$gp" ] && hp=${hostpp_ports[i]}; done
  say "host: fi_pingpong -p ntx -d ivshmem-host -e rdm -m tagged -S $size -I $it -c -P ${hp:-?} 127.0.0.1 (guest a's port $gp)"
  if [ -n "${hp:-}" ]; then
    timeout $((30 * scale)) env FI_PROVIDER_PATH="$top/.libs" FI_NTX_IVSHMEM_SOCKET="$priv/sock" \
      FI_LOG_LEVEL="${FI_LOG_LEVEL:-warn}" FI_LOG_PROV="${FI_LOG_PROV:-ntx}" \
      fi_pingpong -p ntx -d ivshmem-host -e rdm -m tagged -S "$size" -I "$it" -c \
      -P "$hp" 127.0.0.1 > "$priv/hostpp.out" 2>&1
    rc=$?
  else
    echo "no forwarded port for guest port $gp" > "$priv/hostpp.out"; rc=1
  fi
  { echo "rc $rc"; cat "$priv/hostpp.out"; } > "$run/host.hostpp.tmp"
  mv "$run/host.hostpp.tmp" "$run/host.hostpp-$hostpp_n"
  tail -n 2 "$priv/hostpp.out" | sed 's/^/host| /'
}

ntx_step() {
  local srvbin=$top/test/ivshmem/ntx_ivshmem_server i lport stamp logs start hostfwd envs_a=()
  local rca='' rcb='' first rc ended='' killed='' kill_t='' v envs=() prekill
  rxe_ready || return 1   # the build tree; rxe_adds
  if [ ! -x "$srvbin" ]; then
    make -C "$top" test/ivshmem/ntx_ivshmem_server > /dev/null ||
      { say "cannot build ntx_ivshmem_server"; return 1; }
  fi
  priv=$(mktemp -d "${TMPDIR:-/tmp}/ntx-ivshmem.XXXXXX") || return 1
  "$srvbin" -S "$priv/sock" -l "$ntx_size" -n 1 -p "$priv/pid" > "$priv/server.log" 2>&1 &
  server=$!
  for ((i = 0; i < 100; i++)); do
    [ -S "$priv/sock" ] && [ -s "$priv/pid" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  [ -S "$priv/sock" ] || { say "ntx_ivshmem_server did not start:"; cat "$priv/server.log"; return 1; }
  run=$(mktemp -d "$top/.ivshmem-ntx.XXXXXX") || return 1
  lport=$((20000 + RANDOM % 20000))
  while port_taken $lport; do lport=$((lport + 1)); done
  stamp=$(date +%Y%m%d-%H%M%S)-$$
  logs=$vm/logs/ivshmem-ntx-$stamp
  envs=(-e "TOP=$top" -e "FI_PROVIDER_PATH=$top/.libs" -e "LD_LIBRARY_PATH=$top/.libs"
        -e "RXE_TIME_SCALE=$scale" -e "RUN=$run" -e "PROBE=$probe" -e "IV_SIZE=$ntx_size")
  for v in IVSHMEM_NTX_STEPS IVSHMEM_FUNC_FILTER IVSHMEM_PP_ITERS IVSHMEM_PP_SIZES \
           IVSHMEM_KILL_BOUND IVSHMEM_KILL_EPS IVSHMEM_BENCH_SIZES IVSHMEM_BENCH_REPEAT \
           FI_LOG_LEVEL FI_LOG_PROV; do
    [ -n "${!v:-}" ] && envs+=(-e "$v=${!v}")
  done
  mpi_image || return 1
  hostpp_n=0
  case " ${IVSHMEM_NTX_STEPS:-host} " in
    *" host "*) hostpp_fwds; envs_a=(-U "$hostfwd" -e HOSTPP=1);;
    *) envs_a=();;
  esac
  say "step ntx: qemu $accel, time-out ${ntx_tmo}s each; ntx_ivshmem_server $priv/sock ($ntx_size bytes, pid $server); link 127.0.0.1:$lport; build tree $top"
  say "console logs $logs-{a,b}.log"
  start=$SECONDS

  ntx_guest() { # role, address, peer address, netdev socket, host CPU
    local log=$logs-$1.log pin=() own=()
    [ "$1" = a ] && own=("${envs_a[@]}")
    [ -n "${IVSHMEM_PIN:-}" ] && pin=(taskset -c "$5")
    setsid -w "${pin[@]}" "$rxe/run-guest.sh" -s "$top" -t "$ntx_tmo" -l "$log" -c 1 -m 1G \
      -n eth0 -N "$4" -a "$2" -D "$priv/sock" -q "$priv/qemu-$1.pid" -b "$probe" \
      "${rxe_adds[@]}" "${mpi_adds[@]}" "${envs[@]}" "${own[@]}" -e "ROLE=$1" -e "SELF=$2" -e "PEER=$3" \
      "$here/jobs/ntx.sh" < /dev/null \
      2> >(grep --line-buffered -v -e '^host: qemu exit' -e 'Killed.*timeout --kill-after' -e '^run-guest: adding /' >&2) &
    pids+=($!)
    console "$1" "$log" $!
  }
  ntx_guest a 10.11.12.1 10.11.12.2 "listen=127.0.0.1:$lport" 0
  # its image made (run-guest.sh), qemu listens: a minute or more on a
  # busy machine; bounded by run-guest.sh's end
  for ((i = 0; i < 6000; i++)); do
    port_taken $lport && break
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  port_taken $lport || { say "guest a's qemu never listened on $lport"; return 1; }
  ntx_guest b 10.11.12.2 10.11.12.1 "connect=127.0.0.1:$lport" 1

  # until a guest ends; meanwhile guest b's qemu is killed once guest a
  # streams to it
  while kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null; do
    hostpp_answer
    if [ -z "$killed" ] && [ -e "$run/a.streaming" ]; then
      if kill_guest_b; then
        killed=yes kill_t=$SECONDS
        say "killed guest b's qemu (SIGKILL) while guest a streams to it"
        : > "$run/host.killed"
      else
        killed=failed; : > "$run/host.kill-failed"   # guest a's step fails
      fi
    fi
    sleep 0.2
  done
  if kill -0 "${pids[0]}" 2>/dev/null; then first=${pids[1]}; else first=${pids[0]}; fi
  wait "$first"; rc=$?
  guests_settle "$first" "$rc" "$killed"   # guest b killed on purpose ends nothing
  [ -n "$kill_t" ] && say "guest a ended $((SECONDS - kill_t)) s after guest b was killed"

  # guest b killed: its status is what it wrote before
  if [ "$killed" = yes ]; then
    prekill=$(cat "$run/b.prekill" 2>/dev/null)
    say "guest b: killed on purpose (run-guest.sh exit $rcb); its steps before: exit ${prekill:-none written}"
    rcb=${prekill:-1}
  fi
  wait "${tails[@]}"; tails=()   # the console tails
  summaries "$logs" "$ended"
  if [ -n "$(pp_table "$logs-a.log" 2>/dev/null)" ]; then
    echo "fi_pingpong between the guests over the ivshmem domain (guest a, the server):"
    pp_table "$logs-a.log"
  fi
  if [ -s "$run/bench.txt" ]; then
    echo "benchmark between the guests (guest b, the client): fi_pingpong -e rdm -m tagged over"
    echo "the ivshmem domain, ntx's tcp domain and tcp;ofi_rxm on the virtio-net link; qemu $accel"
    sed 's/^/  /' "$run/bench.txt"
  fi
  # the server outlived the guests
  if kill -0 "$server" 2>/dev/null; then
    kill "$server"; wait "$server" 2>/dev/null
  else
    wait "$server"; say "ntx_ivshmem_server ended early (exit $?):"; cat "$priv/server.log"
    [ "$rca" = 0 ] && rca=1
  fi
  server=
  rm -rf "$run" "$priv"; run='' priv=''
  local result=PASS
  [ "$rca" = 0 ] && [ "$rcb" = 0 ] || result=FAIL
  say "step ntx $result: guest a exit $rca, guest b exit $rcb; qemu $accel; $((SECONDS - start)) s"
  [ "$ended" = a ] && return "$rcb"
  [ "$ended" = b ] && return "$rca"
  [ "$rca" = 0 ] || return "$rca"
  return "$rcb"
}

# ---- the steps ----------------------------------------------------------------
final=0 results=()
for s in $steps; do
  case $s in
    plain) plain_step; rc=$?;;
    ntx) ntx_step; rc=$?;;
    *) say "no step $s"; exit 2;;
  esac
  results+=("$s: $([ $rc = 0 ] && echo PASS || echo "FAIL (exit $rc)")")
  [ $rc = 0 ] || [ $final != 0 ] || final=$rc
done
say "$([ $final = 0 ] && echo PASS || echo FAIL): ${results[*]}; qemu $accel; $((SECONDS - tier_start)) s in all"
exit $final
