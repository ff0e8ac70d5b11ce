#!/bin/bash
# Guest job of test/rxe/run-rxe-tests.sh: ntx on the soft-RoCE device rxe0.
# Runs inside the qemu guest (PID 1 is guest-init.sh), with the repository's
# build tree shared at the same path as on the host. Each step prints
# PASS/FAIL with its time; a summary follows; the exit status is 0 only when
# every step passed.
#
# Environment (run-guest.sh -e):
#   TOP               the repository's build tree (required)
#   FI_PROVIDER_PATH  where libfabric finds libntx-fi.so ($TOP/.libs)
#   RXE_TEST_DOMAIN   ntx domain under test (default rxe0; shm or tcp
#                     check the harness itself)
#   RXE_STEPS         steps to run, of: info func pingpong ud reference
#                     (default all; ud: the datagram domain rxe0-ud, a short
#                     subset whatever the domain under test)
#   RXE_TIME_SCALE    multiplies every time-out (default 1; the host passes
#                     more under TCG)
#   RXE_FUNC_JOBS     Criterion jobs of the functional suite (default 1)
#   RXE_FUNC_ARGS     more Criterion options (e.g. --filter 'msg/*'; default:
#                     --filter '!(udp/a_thousand*|udp/a_dead_peer*)', see
#                     func_step)
#   RXE_FUNC_ENV      more environment of the suite (FI_LOG_LEVEL=info)
set -u
: "${TOP:?TOP (the shared build tree) must be set}"
DOM=${RXE_TEST_DOMAIN:-rxe0}
STEPS=${RXE_STEPS:-info func pingpong ud reference}
UD_DOM=rxe0-ud         # the ud domain of rxe0 (listed only when named)
SCALE=${RXE_TIME_SCALE:-1}
ADDR=10.11.12.1        # the dummy netdev under rxe0 (guest-init.sh)
# seen: 250-470 s under TCG on a quiet 2-core host; killed at 1200 s at
# load 12 to 15 (the three guest tiers at once beside busy loops), about
# half way through: a bound for a hang, not a speed
FUNC_TMO=$((600 * SCALE))
PP_TMO=$((60 * SCALE))      # seen: 10-30 s for -S all under TCG
port=47000
# datagrams move every byte as packets (no RDMA): ~220 s for -S all under TCG
named_only() { case $1 in udp|*-ud) return 0;; esac; return 1; }
named_only "$DOM" && PP_TMO=$((150 * SCALE))

. "$TOP/test/rxe/jobs/job-lib.sh"   # now since log step want summary listening

# ---- (a) fi_info lists the domain ------------------------------------------
# udp and the ud domains are listed only when the hints name them (named_only)
fi_info_step() { # [domain]
  local out rc dom=${1:-$DOM} args=()
  named_only "$dom" && args=(-d "$dom")
  out=$(timeout $((60 * SCALE)) fi_info -p ntx "${args[@]}" 2>&1); rc=$?
  echo "fi_info -p ntx (rc $rc), domains:"
  echo "$out" | awk '/domain:/ {print "   " $2}' | sort -u
  if ! echo "$out" | awk -v d="$dom" '$1 == "domain:" && $2 == d {f = 1} END {exit !f}'; then
    echo "no ntx domain named $dom; fi_info said:"
    echo "$out" | tail -n 20 | sed 's/^/   /'
    return 1
  fi
}

ud_info_step() {
  fi_info_step "$UD_DOM" || return 1
  # its FI_EP_DGRAM entry is listed unasked; RDM ones only when named
  if timeout $((60 * SCALE)) fi_info -p ntx -t FI_EP_RDM 2>&1 | awk -v d="$UD_DOM" '$1 == "domain:" && $2 == d {f = 1} END {exit !f}'; then
    echo "fi_info -p ntx -t FI_EP_RDM lists $UD_DOM without being asked"
    return 1
  fi
  echo "fi_info -p ntx -t FI_EP_RDM (no domain named) does not list $UD_DOM"
}

# a raw UD QP sends an endpoint what no correct peer sends (test_ud.c)
adv_ud_step() {
  local out=/tmp/test_adv.out rc
  mkdir -p /tmp/func && cd /tmp/func || return 1
  # FI_LOG_LEVEL=warn: the lines that say what was dropped
  timeout "$FUNC_TMO" env NTX_TEST_UD_DOMAIN="$UD_DOM" FI_PROVIDER=ntx FI_LOG_LEVEL=warn \
    "$TOP/test/adversary/test_adversary" --filter 'ud/*' --verbose=0 > "$out" 2>&1
  rc=$?
  cd / || return 1
  grep -a -E 'Synthesis|ignoring|malformed|FAIL|SKIP' "$out" | grep -v 'Test is disabled' |
    head -20 | sed 's/^/   /'
  # a skip is no pass: the test must have run
  [ $rc = 0 ] && grep -a -q 'Synthesis: Tested: 1 | Passing: 1' "$out"
}

# ---- (b) the functional Criterion suite on the domain ----------------------
func_step() { # [domain [criterion options...]]
  local out=/tmp/test_func.out rc dom=${1:-$DOM} args
  if [ $# -gt 1 ]; then shift; args=("$@"); else
    # shellcheck disable=SC2206  # RXE_FUNC_ARGS is a list of options
    args=(${RXE_FUNC_ARGS:-})
    # by default all but two udp tests. The scale test: a thousand udp
    # endpoints and a heap measurement are the host's (make check); under
    # TCG its rounds and its settling heap ran past their bounds. The dead
    # peer on udp: in this guest, with the host loaded by other work, it
    # saw no error for its send in 2 of about 20 runs (the host's make
    # check passes it; an open problem, DESIGN §10); the rxe0-ud subset
    # below runs it on the ud domain. close/*: hundreds of forked
    # receivers on shm, tcp and udp (the host's make check), not on the
    # domain under test
    [ -n "${RXE_FUNC_ARGS:-}" ] ||
      args=(--filter '!(udp/a_thousand*|udp/a_dead_peer*|close/*)')
  fi
  mkdir -p /tmp/func && cd /tmp/func || return 1   # Criterion's files stay in the guest
  echo "NTX_TEST_DOMAIN=$dom test_func -j${RXE_FUNC_JOBS:-1} --verbose=0 ${args[*]}" \
       "(time-out ${FUNC_TMO}s)"
  # NTX_TEST_DGRAM_DOMAIN: test_udp.c's tests run on the datagram domain
  # under test (udp, or a ud domain)
  timeout "$FUNC_TMO" env ${RXE_FUNC_ENV:-} NTX_TEST_DOMAIN="$dom" FI_NTX_LOCAL_VIA_NETWORK=1 FI_PROVIDER=ntx \
    NTX_TEST_DGRAM_DOMAIN="$(named_only "$dom" && echo "$dom")" \
    "$TOP/test/func/test_func" -j"${RXE_FUNC_JOBS:-1}" --verbose=0 "${args[@]}" \
    > "$out" 2>&1
  rc=$?
  cd / || return 1
  if [ $rc = 0 ]; then
    grep -a 'Synthesis' "$out" | sed 's/^/   /'
  else
    echo "test_func rc $rc (143: killed at the time-out); its output but [RUN]/[PASS] lines:"
    grep -a -v -E '^\[(RUN |PASS)\]' "$out" > "$out.short"
    if [ "$(wc -l < "$out.short")" -le 300 ]; then sed 's/^/   /' "$out.short"
    else
      head -n 200 "$out.short" | sed 's/^/   /'; echo "   [...]"
      tail -n 100 "$out.short" | sed 's/^/   /'
    fi
  fi
  return $rc
}

# ---- fi_pingpong between two processes in the guest ------------------------
pingpong() { # env assignments..., --, fi_pingpong options
  local envs=() spid crc src
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  port=$((port + 1))
  echo "${envs[*]} fi_pingpong $* (server -B $port, client -P $port $ADDR)"
  timeout "$PP_TMO" env "${envs[@]}" fi_pingpong "$@" -B "$port" > /tmp/pp-server.out 2>&1 &
  spid=$!
  # the client starts once the server's control port listens (polled; the
  # server's exit or the time-out ends the wait)
  if ! wait_listen "$port" "$spid" "$PP_TMO"; then
    kill "$spid" 2>/dev/null; wait "$spid"; src=$?
    echo "server never listened on port $port (rc $src):"
    tail -n 30 /tmp/pp-server.out | sed 's/^/   /'
    return 1
  fi
  timeout "$PP_TMO" env "${envs[@]}" fi_pingpong "$@" -P "$port" "$ADDR" \
    > /tmp/pp-client.out 2>&1
  crc=$?
  # a failed client can leave the server waiting for it: end it (our own child)
  [ $crc = 0 ] || kill "$spid" 2>/dev/null
  wait "$spid"; src=$?
  echo "client rc $crc, server rc $src; client's last lines:"
  tail -n 30 /tmp/pp-client.out | sed 's/^/   /'
  if [ $src != 0 ]; then
    echo "server's last lines:"; tail -n 30 /tmp/pp-server.out | sed 's/^/   /'
  fi
  [ $crc = 0 ] && [ $src = 0 ]
}

log "guest: kernel $(uname -r), $(nproc) CPUs, domain under test: $DOM, steps: $STEPS"
rdma link show
ibv_devinfo -d rxe0 2>&1 | grep -E 'hca_id|state|active_mtu|link_layer' | sed 's/^[[:space:]]*/   /'
echo "FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-}"
ls -l "$TOP/.libs/libntx-fi.so" "$TOP/test/func/test_func" 2>&1 | sed 's/^/   /'

want info && step "fi_info -p ntx lists domain $DOM" fi_info_step
want func && step "functional suite (test_func) on $DOM" func_step
if want pingpong; then
  for mode in tagged msg; do
    step "fi_pingpong ntx $DOM rdm $mode -S all -c" pingpong FI_NTX_LOCAL_VIA_NETWORK=1 -- \
      -p ntx -d "$DOM" -e rdm -m "$mode" -S all -c
  done
  # the default: the same domain reaches a peer on this host through the
  # shm window (one FI_PROVIDER=ntx serves a job)
  step "fi_pingpong ntx $DOM rdm tagged -S all -c, local peer through the window" \
    pingpong FI_NTX_LOCAL_VIA_NETWORK=0 -- -p ntx -d "$DOM" -e rdm -m tagged -S all -c
  # FI_EP_MSG: passive endpoint, connect and accept over the device
  step "fi_pingpong ntx $DOM msg endpoints -S all -c" pingpong FI_NTX_LOCAL_VIA_NETWORK=1 -- \
    -p ntx -d "$DOM" -e msg -S all -c
fi
if want ud; then
  # the datagram domain of the same device: named only, fi_pingpong with
  # data checks, a dead peer failing what it owes and messages of every
  # size (a short subset: the whole suite runs with RXE_TEST_DOMAIN=rxe0-ud)
  step "fi_info -p ntx lists $UD_DOM only when named" ud_info_step
  # 2 iterations a size (10 take ~220 s under TCG: RXE_TEST_DOMAIN=rxe0-ud
  # RXE_STEPS=pingpong runs those)
  step "fi_pingpong ntx $UD_DOM rdm tagged -S all -c -I 2" pingpong FI_NTX_LOCAL_VIA_NETWORK=1 -- \
    -p ntx -d "$UD_DOM" -e rdm -m tagged -S all -c -I 2
  step "garbage datagrams from a raw UD QP to an endpoint on $UD_DOM" adv_ud_step
  step "functional subset on $UD_DOM (udp/a_dead_peer*, udp/an_endpoint_that_sent*, msg/udp_path_tagged*)" \
    func_step "$UD_DOM" --filter '@(udp/a_dead_peer*|udp/an_endpoint_that_sent*|msg/udp_path_tagged*)'
fi
if want reference; then
  # libfabric's own verbs provider on the same device, for comparison (rxe's
  # CQs hold at most 32767 entries: ofi_rxm needs a small universe)
  step "reference: fi_pingpong verbs;ofi_rxm rdm tagged -S all -c" pingpong \
    FI_UNIVERSE_SIZE=64 -- -p "verbs;ofi_rxm" -e rdm -m tagged -S all -c
fi

summary "domain $DOM"
