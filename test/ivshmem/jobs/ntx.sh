#!/bin/bash
# The job of both guests of test/ivshmem/run-ivshmem-tests.sh's ntx step:
# two guests, each with an ivshmem-DOORBELL device on one region of the
# host's ntx_ivshmem_server, and a virtio NIC joined to the other guest's
# by a qemu socket netdev (fi_pingpong's out-of-band TCP and the suite's
# peer service go over it). Both share the build tree at the same path.
# ntx's domain here is ivshmem-BDF, BDF the device's PCI address in this
# guest (ivshmem_probe list). Steps:
#   link      the NIC answers ping, the device is there (BAR2 IV_SIZE)
#   info      fi_info -p ntx -d ivshmem-BDF lists the domain (and says
#             which endpoint types)
#   pingpong  fi_pingpong -e rdm -c across the guests, tagged and msg
#             (server on a, client on b); tagged at 8 B and 1 MiB with a
#             job key on both sides (FI_NTX_AUTH_KEY: sealed, every entry
#             with a MAC); -e msg too when fi_info lists FI_EP_MSG on the
#             domain (else reported, not counted)
#   host      a host process and guest a ping-pong through the region: for
#             each size, guest a serves fi_pingpong -e rdm -m tagged -c on
#             its ivshmem domain, and the host (run-ivshmem-tests.sh) runs
#             the client on the domain ivshmem-host (FI_NTX_IVSHMEM_SOCKET:
#             the server's socket, whose memory the guests' devices show)
#             with its control connection through qemu's user network
#             (run-guest.sh -U: guest ports HOST_PORTS reached from host
#             loopback; the second NIC is 10.0.2.15 here). Guest a asks
#             with RUN/a.hostpp-N ("port size iterations"), the host
#             answers with RUN/host.hostpp-N (its status, then its output)
#   func      the functional suite's two-process tests on guest a, each
#             test's peer on guest b (test/rxe/jobs/func-peer.sh, served
#             by nc), as test/rxe/jobs/two-hosts.sh does on rxe0
#   mpi       Open MPI with one rank in each guest: guest a's mpirun
#             (-np 2 --host a:1,b:1) starts the remote daemon through
#             mpi-rsh.sh (plm_rsh_agent; the guests have no ssh) and
#             guest b's mpi-rsh-serve.sh (busybox nc -ll -e); the ranks
#             run test/mpi/mpi_msg (MPI_BIN, built by the host) over the
#             ofi MTL on ntx's ivshmem domain (FI_NTX_DOMAINS): every
#             byte checked, and the MTL's verbose output must name ntx
#             and the domain
#   garbage   guest a runs the suite's
#             pci/garbage_from_another_machine_crashes_and_hangs_nobody:
#             two processes open endpoints on the domain, then exchange
#             400 messages (3 s time-out each; an error ends the loop,
#             and so does 2 x GARBAGE_MS, as a garbled region can make
#             progress slow under TCG: 400 of 400 in 103 s once)
#             while guest b writes random words all over BAR2
#             (ivshmem_probe scribble, GARBAGE_MS); both must end
#             normally, within the test's time-out. Guest b then zeroes
#             BAR2 (ivshmem_probe zero), so that the next step finds a
#             fresh region
#   kill      guest b serves two fi_pingpong streams at once, -e rdm
#             (tagged, 1 MiB) and -e msg (64 KiB), guest a is their client
#             (-v: its "Starting test chrono" says that the loop began);
#             guest b prints its summary first and writes its status to
#             RUN/b.prekill; two seconds into both streams guest a writes
#             RUN/a.streaming, the host kills guest b's qemu and writes
#             RUN/host.killed: each of guest a's fi_pingpong must end with
#             an error within KILL_BOUND seconds of seeing that. (On the
#             msg endpoint the broken connection fails every receive
#             posted on it. fi_pingpong's rdm receives are from any source
#             (no FI_DIRECTED_RECV), which a dead peer does not fail: the
#             rdm stream fails through the send, or the message, in
#             flight to or from guest b, nearly always the case with
#             1 MiB messages.)
#   bench     fi_pingpong -e rdm -m tagged between the guests (server on
#             a, client on b) over three paths, each size in turn: ntx's
#             ivshmem domain, ntx's tcp domain on the virtio-net link, and
#             libfabric's tcp;ofi_rxm on that link (-d eth0). Guest b
#             writes each run's usec and MB/s to RUN/bench.csv and prints
#             per size the medians of IVSHMEM_BENCH_REPEAT runs and the
#             ratios ivshmem/tcp and ivshmem/rxm (latency: below 1 favours
#             the ivshmem domain; bandwidth: above 1). A benchmark: it
#             fails only when an ntx run gave no figure; tcp;ofi_rxm is
#             the reference and is not counted. The table goes to
#             RUN/bench.txt too, for the host to repeat at the end
# The guests meet through marker files in RUN (job-lib.sh: mark, await).
# Exit status 0 only when every step of this guest passed.
#
# Environment (run-guest.sh -e):
#   TOP, FI_PROVIDER_PATH  the shared build tree, its .libs
#   ROLE, SELF, PEER       a or b, this guest's address and the other's
#   RUN                    the directory both guests and the host share
#   PROBE                  ivshmem_probe; IV_SIZE: BAR2's bytes
#   HOSTPP                 1: guest a has the second NIC (step host)
#   MPI_BIN                test/mpi/mpi_msg built by the host (step mpi;
#                          Open MPI's files are in the image: run-guest -b)
#   IVSHMEM_NTX_STEPS      of: link info pingpong host func mpi garbage
#                          bench kill
#                          (default all, in that order)
#   RXE_TIME_SCALE         multiplies the time-outs (default 1)
#   IVSHMEM_FUNC_FILTER    Criterion --filter of the suite's tests
#   IVSHMEM_PP_ITERS       fi_pingpong's iterations of each size (default
#                          by size: 1000 up to 1024 bytes, 100 up to 64 KiB,
#                          else 20; with 10, the first message's connection
#                          set-up dominates the table)
#   IVSHMEM_PP_SIZES       its sizes, each a run (default "8 1024 65536
#                          1048576"; "all" is fi_pingpong's -S all)
#   IVSHMEM_KILL_BOUND     seconds guest a's process may take to fail
#                          after the kill (default 30)
#   IVSHMEM_KILL_EPS       step kill's streams, at once, of: rdm (tagged,
#                          1 MiB messages) msg (64 KiB) (default both;
#                          msg where fi_info lists FI_EP_MSG)
#   IVSHMEM_BENCH_SIZES    step bench's sizes (default "8 1024 65536
#                          1048576"); IVSHMEM_BENCH_REPEAT: runs of each
#                          size and path (default 1)
#   FI_LOG_LEVEL, FI_LOG_PROV  the provider's log (default warn, ntx)
set -u
: "${TOP:?}" "${ROLE:?}" "${SELF:?}" "${PEER:?}" "${RUN:?}" "${PROBE:?}"
. "$TOP/test/rxe/jobs/job-lib.sh"
STEPS=${IVSHMEM_NTX_STEPS:-link info pingpong host func mpi garbage bench kill}
SCALE=${RXE_TIME_SCALE:-1}
# test/rxe/jobs/two-hosts.sh's five
FILTER=${IVSHMEM_FUNC_FILTER:-@(msg/tag_matching_and_unexpected|msg/dead_peer_fails_outstanding_operations|msg/delivery_complete_waits_for_the_receive|rma/offset_addressing_user_keys_and_regv|rma/write_and_atomic_complete_while_the_target_sleeps)}
FUNC_TMO=$((60 * SCALE))
GARBAGE_TMO=$((120 * SCALE))
GARBAGE_MS=$((4000 * SCALE))
PP_TMO=$((30 * SCALE))
PP_ITERS=${IVSHMEM_PP_ITERS:-}
PP_SIZES=${IVSHMEM_PP_SIZES:-8 1024 65536 1048576}
KILL_BOUND=${IVSHMEM_KILL_BOUND:-30}
KILL_EPS=${IVSHMEM_KILL_EPS:-rdm msg}
KILL_PORT=46990
RSH_PORT=46998         # step mpi: mpi-rsh-serve.sh on guest b
HOST_PORTS=(47900 47901 47902 47903)   # step host: run-ivshmem-tests.sh forwards these
MPI_TMO=$((120 * SCALE))
BENCH_SIZES=${IVSHMEM_BENCH_SIZES:-8 1024 65536 1048576}
BENCH_REPEAT=${IVSHMEM_BENCH_REPEAT:-1}
# the provider's log: its warnings (the core's fi_getinfo chatter left out)
LOGENV=(FI_LOG_LEVEL="${FI_LOG_LEVEL:-warn}" FI_LOG_PROV="${FI_LOG_PROV:-ntx}")
SVC_PORT=46999         # the suite's peer service on guest b
port=47000
dom=
trap 'mark gone' EXIT  # the other guest stops waiting for this one

link_step() {
  local out size
  out=$("$PROBE" list) || { echo "no ivshmem device"; return 1; }
  echo "$out" | sed 's/^/   /'
  [ "$(echo "$out" | wc -l)" = 1 ] || { echo "not one ivshmem device"; return 1; }
  dom=ivshmem-${out%% *} size=$(echo "$out" | awk '{print $3}')
  [ "$size" = "$IV_SIZE" ] || { echo "BAR2 is $size bytes, not $IV_SIZE"; return 1; }
  echo "IVPosition $("$PROBE" id "${out%% *}"); ntx's domain: $dom"
  mark up && await up $((60 * SCALE)) || return 1
  ping -c 3 -W 5 "$PEER" | tail -n 2 | sed 's/^/   /'
  [ "${PIPESTATUS[0]}" = 0 ]
}

msg_ep=0   # fi_info lists FI_EP_MSG on the domain
info_step() {
  local out rc
  out=$(env "${LOGENV[@]}" fi_info -p ntx -d "$dom" 2>&1); rc=$?
  echo "$out" | grep -a -E 'provider:|domain:|type:|protocol:|^libfabric' | sort | uniq -c | sed 's/^/   /'
  [ $rc = 0 ] || { echo "fi_info rc $rc"; return 1; }
  echo "$out" | awk '$1 == "domain:" {print $2}' | grep -qx "$dom" ||
    { echo "ntx lists no $dom; its domains:"; fi_info -p ntx | awk '$1 == "domain:" {print "   " $2}' | sort -u; return 1; }
  echo "$out" | grep -q 'type:.*FI_EP_MSG' && msg_ep=1
  echo "FI_EP_MSG on $dom: $([ $msg_ep = 1 ] && echo listed || echo not listed)"
}

# fi_pingpong: the server on guest SRV (a, unless given), the client on
# the other; the ntx log at warn
pingpong() { # server role, fi_pingpong options
  local srv=$1 pid rc out=/tmp/pp.out
  shift
  port=$((port + 1))
  if [ "$ROLE" = "$srv" ]; then
    echo "server: fi_pingpong $* -B $port"
    timeout "$PP_TMO" env "${LOGENV[@]}" fi_pingpong "$@" -B "$port" > "$out" 2>&1 &
    pid=$!
    wait_listen "$port" "$pid" "$PP_TMO"; mark "pp$port"
    wait "$pid"; rc=$?
  else
    await "pp$port" $((PP_TMO + 30)) || return 1
    echo "client: fi_pingpong $* -P $port $PEER"
    timeout "$PP_TMO" env "${LOGENV[@]}" fi_pingpong "$@" -P "$port" "$PEER" > "$out" 2>&1
    rc=$?
  fi
  echo "rc $rc (time-out ${PP_TMO} s):"
  tail -n 40 "$out" | sed 's/^/   /'
  return $rc
}

iters() { # size: fi_pingpong's iterations
  if [ -n "$PP_ITERS" ]; then echo "$PP_ITERS"
  elif [ "$1" = all ]; then echo 10
  elif [ "$1" -le 1024 ]; then echo 1000
  elif [ "$1" -le 65536 ]; then echo 100
  else echo 20; fi
}
pingpong_step() {
  local mode s
  for mode in tagged msg; do
    for s in $PP_SIZES; do
      step "fi_pingpong ntx $dom rdm $mode -S $s -I $(iters "$s") -c across the guests" \
        pingpong a -p ntx -d "$dom" -e rdm -m "$mode" -S "$s" -I "$(iters "$s")" -c
    done
  done
  # sealed connections: a job key on both sides (FI_NTX_AUTH_KEY), so
  # every entry after the exchange carries a MAC the receiver checks
  for s in 8 1048576; do
    FI_NTX_AUTH_KEY=ivshmem-tier-job step "fi_pingpong ntx $dom rdm tagged -S $s -c with a job key (sealed) across the guests" \
      pingpong a -p ntx -d "$dom" -e rdm -m tagged -S "$s" -I "$(iters "$s")" -c
  done
  # FI_EP_MSG where ntx lists it on this domain (both guests decided alike:
  # the same image and provider)
  if [ $msg_ep = 1 ]; then
    step "fi_pingpong ntx $dom msg endpoint -S 65536 -I $(iters 65536) -c across the guests" \
      pingpong a -p ntx -d "$dom" -e msg -S 65536 -I "$(iters 65536)" -c
  else
    log "no FI_EP_MSG on $dom (fi_info): fi_pingpong -e msg not run"
  fi
}

# ---- a host process and guest a, through the region -----------------------
host_nic() { # up: the NIC on qemu's user network (run-guest.sh -U) as
            # 10.0.2.15/24; down: without its address, down again (a
            # second NIC up broke tcp;ofi_rxm's fi_enable in the steps
            # after: EBADF)
  local d
  for d in /sys/class/net/*; do
    case $(cat "$d/address" 2>/dev/null) in
      52:54:00:0b:0d:*)
        if [ "$1" = up ]; then
          ip addr add 10.0.2.15/24 dev "${d##*/}" && ip link set "${d##*/}" up
        else
          ip addr flush dev "${d##*/}"; ip link set "${d##*/}" down
        fi
        return;;
    esac
  done
  echo "no NIC on qemu's user network"; return 1
}
host_step() { # guest a: the servers; the host runs the clients
  local s n=0 p it pid srv rc=0 ans i
  [ "${HOSTPP:-}" = 1 ] || { echo "no HOSTPP: the host forwards no port here"; return 1; }
  host_nic up || return 1
  for s in $PP_SIZES; do
    p=${HOST_PORTS[n % ${#HOST_PORTS[@]}]} it=$(iters "$s")
    n=$((n + 1)) ans=$RUN/host.hostpp-$n
    echo "server: fi_pingpong -p ntx -d $dom -e rdm -m tagged -S $s -I $it -c -B $p; the host's client on ivshmem-host"
    timeout "$PP_TMO" env "${LOGENV[@]}" fi_pingpong -p ntx -d "$dom" -e rdm -m tagged \
      -S "$s" -I "$it" -c -B "$p" > /tmp/hpp.out 2>&1 &
    pid=$!
    if ! wait_listen "$p" "$pid" "$PP_TMO"; then
      wait "$pid"; echo "   the server never listened (rc $?):"; tail -n 5 /tmp/hpp.out | sed 's/^/   /'
      rc=1; continue
    fi
    echo "$p $s $it" > "$RUN/a.hostpp.tmp" && mv "$RUN/a.hostpp.tmp" "$RUN/a.hostpp-$n"
    wait "$pid"; srv=$?
    for ((i = 0; i < (PP_TMO + 30) * 10; i++)); do [ -e "$ans" ] && break; sleep 0.1; done
    echo "   guest a's server: rc $srv"; tail -n 3 /tmp/hpp.out | sed 's/^/   /'
    if [ -e "$ans" ]; then
      echo "   the host's client: $(head -n 1 "$ans")"; tail -n +2 "$ans" | tail -n 3 | sed 's/^/   /'
      [ "$(head -n 1 "$ans")" = "rc 0" ] || rc=1
    else
      echo "   the host's client never answered"; rc=1
    fi
    [ $srv = 0 ] || rc=1
  done
  host_nic down
  return $rc
}

# the suite's two-process tests: the tests on guest a, their peers on b
func_a() {
  local out=/tmp/test_func.out rc
  await func-service $((60 * SCALE)) || return 1
  mkdir -p /tmp/func && cd /tmp/func || return 1
  echo "NTX_TEST_PEER_REMOTE=$PEER:$SVC_PORT NTX_TEST_DOMAIN=$dom test_func -j1 --filter '$FILTER'"
  timeout "$FUNC_TMO" env NTX_TEST_PEER_REMOTE="$PEER:$SVC_PORT" FI_PROVIDER=ntx \
    NTX_TEST_DOMAIN="$dom" "${LOGENV[@]}" "$TOP/test/func/test_func" -j1 \
    --verbose=0 --filter "$FILTER" > "$out" 2>&1
  rc=$?
  cd / && mark func-done
  grep -a -v -E '^\[(RUN |SKIP)\]|Running [0-9]+ tests? from' "$out" | tail -n 100 | sed 's/^/   /'
  echo "   (rc $rc; time-out ${FUNC_TMO} s)"
  return $rc
}
func_b() {
  local svc rc=0 f
  mkdir -p "$RUN/peer" || return 1
  env FI_PROVIDER=ntx NTX_TEST_DOMAIN="$dom" "${LOGENV[@]}" PEER_LOGS="$RUN/peer" \
    setsid nc -ll -p "$SVC_PORT" -e "$TOP/test/rxe/jobs/func-peer.sh" &
  svc=$!
  wait_listen "$SVC_PORT" "$svc" 30 && mark func-service || rc=1
  await func-done $((FUNC_TMO + 60)) || rc=1
  kill -- -"$svc" 2>/dev/null; wait "$svc" 2>/dev/null
  echo "peer sides run here: $(ls "$RUN/peer" | wc -l); what they said:"
  for f in "$RUN/peer"/*; do
    [ -e "$f" ] || continue
    grep -a -v -E '^\[(RUN |PASS|SKIP|----|====)\]|^test_func rc 0$' "$f" |
      sed "s|^|   $(basename "$f"): |"
  done
  return $rc
}

# ---- Open MPI, one rank in each guest ---------------------------------------
mpi_a() {
  local out=/tmp/mpi.out rc ok=0 h
  [ -n "${MPI_BIN:-}" ] && [ -x "$MPI_BIN" ] || { echo "no MPI_BIN: the host built no test/mpi/mpi_msg"; return 1; }
  await mpi-rsh $((60 * SCALE)) || return 1
  echo "orterun -np 2 --host $SELF:1,$PEER:1 --mca pml cm --mca mtl ofi -x FI_PROVIDER=ntx -x FI_NTX_DOMAINS=$dom $MPI_BIN single"
  timeout "$MPI_TMO" env MPI_RSH_PORT="$RSH_PORT" OMPI_MCA_mca_base_component_show_load_errors=0 \
    orterun --allow-run-as-root -np 2 --host "$SELF:1,$PEER:1" --display-map \
    --mca plm_rsh_agent "$TOP/test/ivshmem/jobs/mpi-rsh.sh" --mca oob_tcp_if_include eth0 \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include ntx \
    --mca mtl_base_verbose 100 --mca mtl_ofi_verbose 100 \
    -x FI_PROVIDER=ntx -x FI_PROVIDER_PATH -x LD_LIBRARY_PATH -x FI_NTX_DOMAINS="$dom" \
    -x FI_LOG_LEVEL="${FI_LOG_LEVEL:-warn}" -x FI_LOG_PROV="${FI_LOG_PROV:-ntx}" \
    "$MPI_BIN" single > "$out" 2>&1
  rc=$?
  mark mpi-done
  grep -a -v -E 'mca:|mca: base:' "$out" | tail -n 30 | sed 's/^/   /'
  echo "   (rc $rc; time-out ${MPI_TMO} s)"
  [ $rc = 0 ] || ok=1
  grep -aq 'Selected component \[ofi\]' "$out" || { echo "the ofi MTL was not selected"; ok=1; }
  grep -aEq "mtl:ofi:prov(ider)?: ntx" "$out" || { echo "the ofi MTL did not run on ntx"; ok=1; }
  # one rank on each machine (the guests' host names: ivshmem-a, -b), each
  # on the ivshmem domain
  for h in a b; do
    grep -aEq "^\[ivshmem-$h:[0-9]+\] .*mtl:ofi:provider(:domain)?: $dom\$" "$out" ||
      { echo "no rank on guest $h ran the ofi MTL on $dom"; ok=1; }
  done
  grep -aq 'mpi_msg np=2 .*PASS' "$out" || { echo "mpi_msg said no PASS"; ok=1; }
  return $ok
}
mpi_b() {
  local svc rc=0
  hostname "ivshmem-b" 2>/dev/null
  setsid nc -ll -p "$RSH_PORT" -e "$TOP/test/ivshmem/jobs/mpi-rsh-serve.sh" &
  svc=$!
  wait_listen "$RSH_PORT" "$svc" 30 && mark mpi-rsh || rc=1
  await mpi-done $((MPI_TMO + 60)) || rc=1
  kill -- -"$svc" 2>/dev/null; wait "$svc" 2>/dev/null
  return $rc
}

# ---- a guest that writes garbage all over the region ----------------------
garbage_a() {
  local out=/tmp/garbage.out rc
  mkdir -p /tmp/func && cd /tmp/func || return 1
  echo "NTX_TEST_DOMAIN=$dom test_func --filter pci/garbage_from_another_machine_crashes_and_hangs_nobody"
  timeout "$GARBAGE_TMO" env FI_PROVIDER=ntx NTX_TEST_DOMAIN="$dom" \
    NTX_PCI_GARBAGE_OPEN="$RUN/a.garbage-open" NTX_PCI_GARBAGE_GO="$RUN/b.scribbling" \
    NTX_PCI_EXCHANGE_MS=$((GARBAGE_MS * 2)) \
    "${LOGENV[@]}" "$TOP/test/func/test_func" -j1 --verbose=0 \
    --filter 'pci/garbage_from_another_machine_crashes_and_hangs_nobody' > "$out" 2>&1
  rc=$?
  cd / && mark garbage-done
  # the provider's warnings about what it read, counted by kind
  grep -a -E '::ntx:[a-z_]+:[a-z_0-9]+\(\):[0-9]+<warn>' "$out" |
    sed -E 's/^libfabric:[0-9]+:[0-9]+::ntx:[a-z_]+:([a-z_0-9]+)\(\):[0-9]+<warn> /\1: /; s/[0-9]+/N/g' |
    sort | uniq -c | sort -rn | head -n 15 | sed 's/^/   /'
  grep -a -v -e 'libfabric:' -e '^\[\(RUN \|SKIP\)\]' "$out" | tail -n 20 | sed 's/^/   /'
  echo "   (rc $rc; time-out ${GARBAGE_TMO} s)"
  grep -aq 'pci: the parent exchanged' "$out" || { echo "the test did not run"; rc=1; }
  await zeroed $((60 * SCALE)) || rc=1
  return $rc
}
garbage_b() {
  local rc=0 pid bdf=${dom#ivshmem-}
  await garbage-open $((GARBAGE_TMO + 60)) || return 1
  "$PROBE" scribble "$bdf" "$GARBAGE_MS" > /tmp/scribble.out 2>&1 &
  pid=$!
  # guest a's processes exchange once the first garbage is written
  until grep -q '^scribbling' /tmp/scribble.out; do
    kill -0 "$pid" 2>/dev/null || { echo "ivshmem_probe scribble ended:"; cat /tmp/scribble.out; return 1; }
    sleep 0.1
  done
  mark scribbling
  await garbage-done $((GARBAGE_TMO + 60)) || rc=1
  wait "$pid" || rc=1
  sed 's/^/   /' /tmp/scribble.out
  "$PROBE" zero "$bdf" | sed 's/^/   /'
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  mark zeroed
  return $rc
}

# ---- the benchmark: ivshmem against tcp on the guests' link ---------------
bench_paths="ivshmem tcp rxm"
bench_one() { # path size iterations: one run; guest b appends "path,size,usec,MB/s"
  local path=$1 size=$2 it=$3 opts=() pid line rc=0
  case $path in
    ivshmem) opts=(-p ntx -d "$dom");;
    tcp) opts=(-p ntx -d tcp);;
    rxm) opts=(-p "tcp;ofi_rxm" -d eth0);;
  esac
  opts+=(-e rdm -m tagged -S "$size" -I "$it")
  port=$((port + 1))
  if [ "$ROLE" = a ]; then
    timeout "$PP_TMO" env "${LOGENV[@]}" fi_pingpong "${opts[@]}" -B "$port" > /tmp/bench.out 2>&1 &
    pid=$!
    wait_listen "$port" "$pid" "$PP_TMO"; mark "b$port"
    wait "$pid" || { echo "server: fi_pingpong ${opts[*]} failed:"; tail -n 5 /tmp/bench.out | sed 's/^/   /'; }
  else
    await "b$port" $((PP_TMO + 30)) || return 1
    line=$(timeout "$PP_TMO" env "${LOGENV[@]}" fi_pingpong "${opts[@]}" -P "$port" "$PEER" \
             2> /tmp/bench.err | awk 'NF >= 8 && $1 ~ /^[0-9]/ { print $(NF-1) "," $(NF-2) }' | tail -n 1)
    [ -n "$line" ] || { echo "client: fi_pingpong ${opts[*]} gave no figure:"; tail -n 5 /tmp/bench.err | sed 's/^/   /'; rc=1; }
    echo "$path,$size,${line:-nan,nan}" >> "$RUN/bench.csv"
  fi
  mark "e$port"; await "e$port" $((PP_TMO + 30)) || return 1   # both sides, then the next
  return $rc
}
bench_table() { # RUN/bench.csv: medians and ratios
  awk -F, "$AWK_MEDIANS"'
    NR > 1 && $3 != "nan" { k = $1 SUBSEP $2; n[k]++; us[k, n[k]] = $3; bw[k, n[k]] = $4
                            if (!seen[$2]++) order[++m] = $2 }
    function r(x, y) { return ratio(x, y, "%.3f") }
    END {
      printf "%8s | %9s %9s %9s | %9s %9s %9s | %7s %7s | %7s %7s\n", "size",
        "ivshm us", "tcp us", "rxm us", "ivshm MB/s", "tcp MB/s", "rxm MB/s",
        "lat/tcp", "bw/tcp", "lat/rxm", "bw/rxm"
      for (i = 1; i <= m; i++) {
        s = order[i]
        li = med("ivshmem" SUBSEP s, us); lt = med("tcp" SUBSEP s, us); lr = med("rxm" SUBSEP s, us)
        bi = med("ivshmem" SUBSEP s, bw); bt = med("tcp" SUBSEP s, bw); br = med("rxm" SUBSEP s, bw)
        printf "%8s | %9s %9s %9s | %9s %9s %9s | %7s %7s | %7s %7s\n", s, li, lt, lr, bi, bt, br,
          r(li, lt), r(bi, bt), r(li, lr), r(bi, br)
      }
    }' "$RUN/bench.csv"
}
bench_step() {
  local s k p rc=0
  [ "$ROLE" = b ] && echo "path,size,usec,mbps" > "$RUN/bench.csv"
  for s in $BENCH_SIZES; do
    for ((k = 0; k < BENCH_REPEAT; k++)); do
      for p in $bench_paths; do
        bench_one "$p" "$s" "$(iters "$s")" || { [ "$p" = rxm ] || rc=1; }
      done
    done
  done
  [ "$ROLE" = b ] || { echo "   guest b has the figures"; return $rc; }
  echo "   fi_pingpong -e rdm -m tagged, medians of $BENCH_REPEAT run(s): ivshmem: ntx's $dom;"
  echo "   tcp: ntx's tcp domain and rxm: tcp;ofi_rxm, both on the virtio-net link;"
  echo "   lat/x below 1 and bw/x above 1 favour the ivshmem domain"
  bench_table > "$RUN/bench.txt"
  sed 's/^/   /' "$RUN/bench.txt"
  return $rc
}

# ---- guest b killed mid-stream --------------------------------------------
# One fi_pingpong stream of each type in KILL_EPS at once, each on its own
# control port: guest b serves them, guest a is their client.
kill_eps=()
kill_options() { # endpoint type: its fi_pingpong options, in kill_opts
  case $1 in
    rdm) kill_opts=(-p ntx -d "$dom" -e rdm -m tagged -S 1048576 -I 100000000 -v);;
    msg) kill_opts=(-p ntx -d "$dom" -e msg -S 65536 -I 100000000 -v);;
  esac
}
kill_types() { # the types to run: msg only where fi_info lists it
  local ep
  kill_eps=()
  for ep in $KILL_EPS; do
    case $ep in
      rdm) kill_eps+=(rdm);;
      msg) if [ $msg_ep = 1 ]; then kill_eps+=(msg); else log "no FI_EP_MSG on $dom: no msg stream"; fi;;
      *) log "IVSHMEM_KILL_EPS: no type $ep"; return 1;;
    esac
  done
  [ ${#kill_eps[@]} -gt 0 ]
}
pp_out() { # fi_pingpong -v's output less its banner (the indented lines)
  grep -a -v -e '^[[:space:]]' -e '^$' -e '^fi_info:$' "$1" | tail -n 25 | sed 's/^/   /'
}
alive() { # pids...: is any running?
  local p
  for p; do kill -0 "$p" 2>/dev/null && return 0; done
  return 1
}
kill_a() {
  local pids=() pid rc t0 t1 i n ep ok=0 started
  kill_types || return 1
  await kill-srv $((PP_TMO + 30)) || return 1
  for ((n = 0; n < ${#kill_eps[@]}; n++)); do
    kill_options "${kill_eps[n]}"
    echo "client: fi_pingpong ${kill_opts[*]} -P $((KILL_PORT + n)) $PEER"
    timeout $((120 * SCALE)) env "${LOGENV[@]}" fi_pingpong "${kill_opts[@]}" \
      -P $((KILL_PORT + n)) "$PEER" > "/tmp/kill.$n.out" 2>&1 &
    pids+=($!)
  done
  # streaming: fi_pingpong -v says "Starting test chrono" (on stderr, at
  # once) when its loop begins; two seconds after all began, the host may
  # kill
  for ((i = 0; i < PP_TMO * 10; i++)); do
    started=0
    for ((n = 0; n < ${#pids[@]}; n++)); do
      grep -q 'Starting test chrono' "/tmp/kill.$n.out" && started=$((started + 1))
    done
    [ $started = ${#pids[@]} ] && break
    sleep 0.1
  done
  [ $started = ${#pids[@]} ] && sleep 2
  for ((n = 0; n < ${#pids[@]}; n++)); do
    if ! kill -0 "${pids[n]}" 2>/dev/null || ! grep -q 'Starting test chrono' "/tmp/kill.$n.out"; then
      kill "${pids[@]}" 2>/dev/null
      echo "fi_pingpong -e ${kill_eps[n]} did not start streaming, or ended before the kill:"
      pp_out "/tmp/kill.$n.out"; wait; mark kill-over; return 1
    fi
  done
  log "streaming (fi_pingpong's loops began 2 s ago: ${kill_eps[*]}): the host may kill guest b"
  mark streaming
  # the host kills guest b's qemu, then writes host.killed
  for ((i = 0; i < 600 * SCALE; i++)); do
    [ -e "$RUN/host.killed" ] || [ -e "$RUN/host.kill-failed" ] && break
    sleep 0.1
  done
  t0=$(now)
  if [ ! -e "$RUN/host.killed" ]; then
    kill "${pids[@]}" 2>/dev/null; wait
    echo "the host did not kill guest b"; mark kill-over; return 1
  fi
  log "the host killed guest b: waiting up to ${KILL_BOUND} s for fi_pingpong to fail"
  for ((i = 0; i < KILL_BOUND * 10; i++)); do
    alive "${pids[@]}" || break
    # each one's end, as it comes
    for ((n = 0; n < ${#pids[@]}; n++)); do
      [ -e "/tmp/kill.$n.t" ] || kill -0 "${pids[n]}" 2>/dev/null || since "$t0" > "/tmp/kill.$n.t"
    done
    sleep 0.1
  done
  for ((n = 0; n < ${#pids[@]}; n++)); do
    ep=${kill_eps[n]} pid=${pids[n]}
    if kill -0 "$pid" 2>/dev/null; then
      echo "HANG: fi_pingpong -e $ep still running $(since "$t0") s after the kill; its output:"
      pp_out "/tmp/kill.$n.out"
      kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
      ok=1; continue
    fi
    wait "$pid"; rc=$?
    t1=$(cat "/tmp/kill.$n.t" 2>/dev/null || since "$t0")
    echo "fi_pingpong -e $ep ended ${t1} s after the kill was seen, rc $rc; its output:"
    pp_out "/tmp/kill.$n.out"
    [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] ||
      { echo "expected an error exit, not rc $rc"; ok=1; }
  done
  return $ok
}
kill_b() { # the servers; this guest's summary goes out first: it will not end by itself
  local pids=() n i
  kill_types || return 1
  for ((n = 0; n < ${#kill_eps[@]}; n++)); do
    kill_options "${kill_eps[n]}"
    echo "server: fi_pingpong ${kill_opts[*]} -B $((KILL_PORT + n))"
    timeout $((120 * SCALE)) env "${LOGENV[@]}" fi_pingpong "${kill_opts[@]}" \
      -B $((KILL_PORT + n)) > "/tmp/kill.$n.out" 2>&1 &
    pids+=($!)
    wait_listen $((KILL_PORT + n)) "$!" "$PP_TMO" ||
      { echo "the server never listened"; kill "${pids[@]}"; wait; return 1; }
  done
  summary "guest $ROLE, before the host kills it"
  echo $? > "$RUN/b.prekill"
  mark kill-srv
  log "waiting to be killed (while fi_pingpong serves guest a: ${kill_eps[*]})"
  for ((i = 0; i < 1200 * SCALE; i++)); do
    alive "${pids[@]}" || break
    [ -e "$RUN/a.gone" ] || [ -e "$RUN/a.kill-over" ] && break
    sleep 0.1
  done
  echo "still alive: not killed (guest a did not stream); fi_pingpong:"
  kill "${pids[@]}" 2>/dev/null; wait
  for ((n = 0; n < ${#pids[@]}; n++)); do pp_out "/tmp/kill.$n.out"; done
  return 1
}

log "guest $ROLE ($SELF, peer $PEER): kernel $(uname -r), $(nproc) CPUs, steps: $STEPS"
step "link to $PEER, the ivshmem device" link_step
[ -n "$dom" ] || { summary "guest $ROLE"; exit 1; }
want info && step "fi_info -p ntx -d $dom" info_step
want pingpong && pingpong_step
if want host; then
  if [ "$ROLE" = a ]; then step "a host process and this guest: fi_pingpong over the region (host: ivshmem-host)" host_step; mark host-done
  else step "wait while the host and guest a ping-pong" await host-done $(((PP_TMO + 60) * 4)); fi
fi
if want func; then
  if [ "$ROLE" = a ]; then step "functional suite '$FILTER' on $dom, peers on guest b" func_a
  else step "functional suite's peers for guest a on $dom" func_b; fi
fi
if want mpi; then
  if [ "$ROLE" = a ]; then hostname ivshmem-a 2>/dev/null; step "Open MPI, one rank here and one on guest b, ofi MTL on $dom" mpi_a
  else step "Open MPI's remote daemon for guest a's mpirun" mpi_b; fi
fi
if want garbage; then
  if [ "$ROLE" = a ]; then step "guest b writes garbage all over the region: two processes here end normally" garbage_a
  else step "write garbage all over the region for ${GARBAGE_MS} ms, then zero it" garbage_b; fi
fi
want bench && step "benchmark: fi_pingpong over $dom, ntx tcp and tcp;ofi_rxm on the guests' link" bench_step
if want kill; then
  if [ "$ROLE" = a ]; then step "guest b killed mid-stream: fi_pingpong ($KILL_EPS) here fails within ${KILL_BOUND} s" kill_a
  else step "serve fi_pingpong until the host kills this guest" kill_b; fi
fi
summary "guest $ROLE"
