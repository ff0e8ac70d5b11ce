#!/bin/bash
# Guest job of test/rxe/run-rxe-two-hosts.sh: one of two guests, each with
# its own kernel and rxe0 on a virtio NIC, the two NICs joined by a qemu
# socket netdev. Guest a serves fi_pingpong and runs the functional
# suite's two-process tests; guest b is the fi_pingpong client and the
# suite's peer (its side of each test runs here: func-peer.sh, served by
# nc). Last, step netem: each guest's eth0 sends through netem (delay,
# jitter and reordering; then loss and duplication too) and the datagram
# domains rxe0-ud and udp must still deliver every message intact, while
# ntx's own counters show that the packets did arrive out of order.
# After all that, libfabric's own verbs;ofi_rxm for reference (not
# counted). The guests meet through marker files (job-lib.sh: mark,
# await).
# Each step prints PASS/FAIL with its time, a summary follows; the exit
# status is 0 only when every step of this guest passed.
#
# Environment (run-guest.sh -e):
#   TOP, FI_PROVIDER_PATH  the shared build tree, its .libs
#   ROLE, SELF, PEER       a or b, this guest's address and the other's
#   RUN                    the directory both guests share for markers/logs
#   RXE_STEPS              of: link pingpong reference func netem
#                          (default all)
#   RXE_TIME_SCALE         multiplies every time-out (default 1)
#   RXE_FUNC_FILTER        Criterion --filter of the suite's tests
#   RXE_PP_ITERS           fi_pingpong iterations of each size (default 2:
#                          -S all checks every size; bench/ measures)
#   RXE_NETEM_RUNS         netem's links, of: reorder lossy (default both)
#   RXE_NETEM_DOMAINS      the streams' domains (default: rxe0-ud udp)
#   RXE_NETEM_PINGPONG     fi_pingpong's on the reordering link (default:
#                          rxe0-ud udp)
set -u
: "${TOP:?}" "${ROLE:?}" "${SELF:?}" "${PEER:?}" "${RUN:?}"
. "$TOP/test/rxe/jobs/job-lib.sh"
STEPS=${RXE_STEPS:-link pingpong reference func netem}
SCALE=${RXE_TIME_SCALE:-1}
# two-process tests that a ping-pong does not cover, cheap enough under
# TCG (the link's round trip is ~25 ms there: the suite's 10000-operation
# atomic tests alone would take minutes)
FILTER=${RXE_FUNC_FILTER:-@(msg/tag_matching_and_unexpected|msg/dead_peer_fails_outstanding_operations|msg/delivery_complete_waits_for_the_receive|rma/offset_addressing_user_keys_and_regv|rma/write_and_atomic_complete_while_the_target_sleeps)}
FUNC_TMO=$((150 * SCALE))
PP_TMO=$((60 * SCALE))
PP_ITERS=${RXE_PP_ITERS:-2}
SVC_PORT=46999         # the suite's peer service on guest b
port=47000
trap 'mark gone' EXIT  # the other guest stops waiting for this one

link_step() {
  mark up && await up $((120 * SCALE)) || return 1
  ibv_devinfo -d rxe0 | grep -E 'state|active_mtu' | sed 's/^[[:space:]]*/   /'
  # the first packets also learn the other's MAC (ARP) before rdma_cm needs it
  ping -c 3 -W 5 "$PEER" | tail -n 2 | sed 's/^/   /'
  [ "${PIPESTATUS[0]}" = 0 ] || return 1
  fi_info -p ntx 2>/dev/null | awk '$1 == "domain:" {print $2}' | sort -u |
    grep -qx rxe0 || { echo "ntx lists no rxe0"; return 1; }
}

# fi_pingpong: the server on guest a, the client on guest b
pingpong() { # env assignments..., --, fi_pingpong options
  local envs=() pid rc out=/tmp/pp.out
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  port=$((port + 1))
  if [ "$ROLE" = a ]; then
    echo "server: ${envs[*]} fi_pingpong $* -B $port"
    timeout "$PP_TMO" env "${envs[@]}" fi_pingpong "$@" -B "$port" > "$out" 2>&1 &
    pid=$!
    wait_listen "$port" "$pid" "$PP_TMO"; mark "pp$port"   # a dead server: the client fails at once
    wait "$pid"; rc=$?
  else
    await "pp$port" || return 1
    echo "client: ${envs[*]} fi_pingpong $* -P $port $PEER"
    timeout "$PP_TMO" env "${envs[@]}" fi_pingpong "$@" -P "$port" "$PEER" > "$out" 2>&1
    rc=$?
  fi
  # (its errors come first: stderr is written at once, the table at exit)
  echo "rc $rc (time-out ${PP_TMO} s); its output but the provider's info log:"
  grep -a -v -E '^libfabric:.*<(info|debug)>' "$out" | tail -n 60 | sed 's/^/   /'
  if [ $rc != 0 ] && grep -a -q '^libfabric:' "$out"; then
    echo "the provider's last lines:"
    grep -a '^libfabric:' "$out" | tail -n 30 | sed 's/^/   /'
  fi
  return $rc
}

# the suite's two-process tests: the tests on guest a, their peers on b.
# Each run (both guests count them alike) has its own service port on b
# and its own markers and peer logs; it may add environment (the peers'
# comes from func_b's arguments).
runs=0
func_a() { # filter, env assignments...
  local filter=$1 tag out rc
  shift
  runs=$((runs + 1)) tag=func$runs out=/tmp/test_func.$runs.out
  await "func-service-$tag" || return 1
  mkdir -p /tmp/func && cd /tmp/func || return 1
  echo "NTX_TEST_PEER_REMOTE=$PEER:$(svc_port "$tag") $* test_func -j1 --filter '$filter'"
  timeout "$FUNC_TMO" env NTX_TEST_PEER_REMOTE="$PEER:$(svc_port "$tag")" \
    FI_PROVIDER=ntx NTX_TEST_DOMAIN=rxe0 "$@" \
    "$TOP/test/func/test_func" -j1 --verbose=0 --filter "$filter" > "$out" 2>&1
  rc=$?
  cd / && mark "func-done-$tag"
  grep -a -v -E '^\[(RUN |SKIP)\]|Running [0-9]+ tests? from|^libfabric:' "$out" |
    tail -n 100 | sed 's/^/   /'
  echo "   (rc $rc; time-out ${FUNC_TMO} s)"
  return $rc
}
func_b() { # env assignments...
  local tag svc rc=0 f port
  runs=$((runs + 1)) tag=func$runs
  port=$(svc_port "$tag")
  mkdir -p "$RUN/peer-$tag"
  env FI_PROVIDER=ntx NTX_TEST_DOMAIN=rxe0 "$@" PEER_LOGS="$RUN/peer-$tag" \
    setsid nc -ll -p "$port" -e "$TOP/test/rxe/jobs/func-peer.sh" &
  svc=$!
  wait_listen "$port" "$svc" 30 && mark "func-service-$tag" || rc=1
  await "func-done-$tag" $((FUNC_TMO + 60)) || rc=1
  kill -- -"$svc" 2>/dev/null; wait "$svc" 2>/dev/null
  echo "peer sides run here: $(ls "$RUN/peer-$tag" | wc -l); what they said:"
  for f in "$RUN/peer-$tag"/*; do
    grep -a -v -E '^\[(RUN |PASS|SKIP|----|====)\]|^test_func rc 0$|^libfabric:' "$f" |
      sed "s|^|   $(basename "$f"): |"
  done
  return $rc
}
svc_port() { # funcN: the service port of run N on guest b
  echo $((SVC_PORT + 1 - ${1#func}))
}

# ---- netem on the link ------------------------------------------------------
# Each guest's eth0 sends through netem, so both directions of the link
# are delayed and reordered. rxe sends RoCE packets to the other guest
# through the qdisc (to its own address it would not: rxe loops those back
# below it), and so does the udp socket.
NETEM_REORDER="delay 2ms 1ms reorder 25% 50%"
NETEM_LOSSY="$NETEM_REORDER loss 1% duplicate 1%"

qdisc_counters() { # packets sent and dropped by eth0's root qdisc
  tc -s qdisc show dev eth0 | awk '$1 == "Sent" {
    for (i = 1; i < NF; i++) {
      if ($(i + 1) == "pkt") p = $i
      if ($i == "(dropped") d = $(i + 1) + 0
    }
    print p + 0, d + 0; exit }'
}

netem_on() { # tag, netem options: this guest's egress, once both have it
  local tag=$1; shift
  # shellcheck disable=SC2048,SC2086  # the options are words
  tc qdisc replace dev eth0 root netem $* || return 1
  tc -s qdisc show dev eth0 | sed 's/^/   /'
  mark "netem-$tag" && await "netem-$tag" || return 1
  ping -c 4 "$PEER" | tail -n 1 | sed 's/^/   /'   # the round trip, for the record
}

# rel's counters of this guest's endpoint, logged at its close (FI_LOG_LEVEL
# info, ntx_dgram.c): "N datagrams of data sent, N resent (...), N pure
# ACKs; N taken, N duplicates, N out of order", summed over the lines
rel_counter() { # file, the counter's words ("resent", "out of order", ...)
  grep -a -o "[0-9]* $2" "$1" | awk '{n += $1} END {print n + 0}'
}
rel_sent() { # file: every datagram the endpoint sent
  grep -a -o -E '[0-9]+ (datagrams of data sent|resent|pure ACKs)' "$1" |
    awk '{n += $1} END {print n + 0}'
}

# fi_pingpong -c across the link under netem; then what says that netem
# acted on this guest's traffic: every datagram ntx sent went through the
# qdisc, and the endpoint took packets out of order
netem_pingpong() { # fi_pingpong options
  local s0 d0 s1 d1 out=/tmp/pp.out rc=0 sent ooo
  read -r s0 d0 < <(qdisc_counters)
  pingpong FI_LOG_LEVEL=info FI_LOG_PROV=ntx -- "$@" || return 1
  read -r s1 d1 < <(qdisc_counters)
  echo "rel's counters here:"
  grep -a -o '[a-z]*: [0-9]* datagrams of data sent.*' "$out" | sed 's/^/   /'
  sent=$(rel_sent "$out") ooo=$(rel_counter "$out" "out of order")
  echo "eth0's netem meanwhile: $((s1 - s0)) packets sent, $((d1 - d0)) dropped;" \
       "ntx sent $sent datagrams, took $ooo out of order"
  [ "$sent" -gt 0 ] || { echo "no counters from ntx"; return 1; }
  [ $((s1 - s0 + d1 - d0)) -ge "$sent" ] ||
    { echo "fewer packets through netem than ntx sent"; rc=1; }
  [ "$ooo" -gt 0 ] || { echo "nothing arrived out of order"; rc=1; }
  return $rc
}

# The functional suite's streams (msg/udp_path_*stream_arrives_in_order:
# 240 messages of mixed sizes posted back to back, each checked in its
# place) on a datagram domain, the sender on guest a, the receiver on b.
# Then what says that netem acted: every datagram ntx sent went through
# the guest's qdisc (on the lossy link instead: on a, netem dropped some
# and ntx resent); on b, the receiver took packets out of order (and on
# the lossy link duplicates).
# (on the lossy link the untagged one alone: under TCG each took 20-40 s)
STREAMS='msg/udp_path_*stream_arrives_in_order'
LOSSY_STREAMS='msg/udp_path_stream_arrives_in_order'
netem_func() { # lossy (0|1), datagram domain
  local lossy=$1 dom=$2 s0 d0 s1 d1 logs=/tmp/netem-func.log sent rc=0
  local filter=$STREAMS
  local envs=(NTX_TEST_DGRAM_DOMAIN="$dom" FI_LOG_LEVEL=info FI_LOG_PROV=ntx)
  [ "$lossy" = 1 ] && filter=$LOSSY_STREAMS
  read -r s0 d0 < <(qdisc_counters)
  if [ "$ROLE" = a ]; then
    func_a "$filter" "${envs[@]}" || return 1
    cat /tmp/test_func.$runs.out > "$logs"
  else
    func_b "${envs[@]}" || return 1
    cat "$RUN/peer-func$runs"/* > "$logs"
  fi
  read -r s1 d1 < <(qdisc_counters)
  echo "rel's counters here:"
  grep -a -o '[a-z]*: [0-9]* datagrams of data sent.*' "$logs" | sed 's/^/   /'
  sent=$(rel_sent "$logs")
  echo "eth0's netem meanwhile: $((s1 - s0)) packets sent, $((d1 - d0)) dropped;" \
       "ntx sent $sent datagrams"
  [ "$sent" -gt 0 ] || { echo "no counters from ntx"; return 1; }
  # (a drop counts one udp GSO run once, whatever its datagrams: on the
  # lossy link the drops and the resends say it)
  [ "$lossy" = 1 ] || [ $((s1 - s0)) -ge "$sent" ] ||
    { echo "fewer packets through netem than ntx sent"; rc=1; }
  if [ "$ROLE" = a ] && [ "$lossy" = 1 ]; then
    [ $((d1 - d0)) -gt 0 ] || { echo "netem dropped nothing"; rc=1; }
    [ "$(rel_counter "$logs" resent)" -gt 0 ] || { echo "ntx resent nothing"; rc=1; }
  fi
  if [ "$ROLE" = b ]; then
    [ "$(rel_counter "$logs" "out of order")" -gt 0 ] ||
      { echo "nothing arrived out of order"; rc=1; }
    [ "$lossy" = 0 ] || [ "$(rel_counter "$logs" duplicates)" -gt 0 ] ||
      { echo "no duplicates arrived"; rc=1; }
  fi
  return $rc
}

netem_step() {
  local run net lossy dom
  for run in ${RXE_NETEM_RUNS:-reorder lossy}; do
    lossy=0 net=$NETEM_REORDER
    [ "$run" = lossy ] && lossy=1 net=$NETEM_LOSSY
    step "netem on eth0 ($net)" netem_on "$run" "$net"
    # fi_pingpong -S all on the reordering link (on the lossy one its
    # large sizes take minutes under TCG: rel resends one packet per round
    # trip, DESIGN §10)
    if [ $lossy = 0 ]; then
      # (udp: see DESIGN §10, On a real link: not by default)
      for dom in ${RXE_NETEM_PINGPONG:-rxe0-ud udp}; do
        step "fi_pingpong ntx $dom rdm tagged -S all -c across netem ($net)" \
          netem_pingpong -p ntx -d "$dom" -e rdm -m tagged -S all -I "$PP_ITERS" -c
      done
    fi
    for dom in ${RXE_NETEM_DOMAINS:-rxe0-ud udp}; do
      step "streams in order on $dom across netem ($net)" netem_func "$lossy" "$dom"
    done
  done
  step "netem off" netem_off
}
netem_off() {
  tc qdisc del dev eth0 root || return 1
  mark netem-off && await netem-off
}

log "guest $ROLE ($SELF, peer $PEER): kernel $(uname -r), $(nproc) CPUs, steps: $STEPS"
want link && step "link to $PEER: ping, rxe0 active, ntx lists rxe0" link_step
if want pingpong; then
  for mode in tagged msg; do
    step "fi_pingpong ntx rxe0 rdm $mode -S all -c across the guests" pingpong -- \
      -p ntx -d rxe0 -e rdm -m "$mode" -S all -I "$PP_ITERS" -c
  done
fi
if want func; then
  if [ "$ROLE" = a ]; then step "functional suite '$FILTER', peers on guest b" func_a "$FILTER"
  else step "functional suite's peers for guest a" func_b; fi
fi
want netem && netem_step
# libfabric's own verbs;ofi_rxm, for its numbers: last and not counted.
# Twice under TCG the guests' link stalled while it ran (the kernel's
# NETDEV WATCHDOG, then a panic in rdma_rxe): nothing of ntx runs after it.
reference() {
  # rxe's CQs hold at most 32767 entries: ofi_rxm needs a small universe
  pingpong FI_UNIVERSE_SIZE=64 -- -p "verbs;ofi_rxm" -e rdm -m tagged -S all \
    -I "$PP_ITERS" -c ||
    echo "the reference failed (libfabric's own provider): not counted"
}
want reference &&
  step "reference, not counted: fi_pingpong verbs;ofi_rxm rdm tagged -S all -c" reference
summary "guest $ROLE"
