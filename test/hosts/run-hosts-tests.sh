#!/bin/bash
# ntx across hosts: two hosts made of namespaces (hosts.sh), joined by veth
# pairs on a bridge. Runs, on the tcp domain (and the first fi_info entry,
# which must be one that reaches another host):
#   - fi_pingpong -c, msg and tagged, every size, host 2 -> host 1;
#   - the same with nftables dropping 2 % and duplicating 1 % of the
#     packets on both hosts: nothing lost, nothing delivered twice;
#   - the functional suite's two-process tests with the peer on host 2
#     (messages, RMA, atomics, job keys);
#   - Open MPI, 2 hosts x 2 ranks (shm window inside a host, tcp across),
#     launched through an rsh agent that enters the hosts (rsh-agent.sh):
#     ob1 + btl ofi (point-to-point and one-sided, ntx's default domain
#     list, each rank's address space capped) and the ofi MTL;
#   - a link taken down in the middle of a 1 MiB stream: on MSG
#     endpoints both sides get an error completion (their posted
#     receives fail with the connection), on RDM the side with data in
#     flight does, within FI_NTX_TCP_TIMEOUT_MS (3 s here) plus the
#     kernel's next keepalive probe.
# and on the udp domain (DESIGN §10):
#   - udp: fi_pingpong -c, msg and tagged, every size; the same with 1 %
#     of the packets duplicated; the functional suite's udp tests and
#     two-process msg, RMA and atomics tests with the peer on host 2;
#     with the mpi step too, Open MPI 2 hosts x 2 ranks on the udp domain
#     (FI_NTX_DOMAINS=udp: every rank opens udp);
#   - udploss: fi_pingpong -c, msg and tagged, every size, with 1 % and
#     with 5 % of the packets dropped on both hosts.
# Needs root (namespaces, veth, nftables). Usage: test/hosts/run-hosts-tests.sh
# Environment: HOSTS_STEPS (subset of "pingpong loss func mpi linkdown udp
# udploss"),
# HOSTS_ITERS (fi_pingpong iterations per size, default 20), HOSTS_LOSS_ITERS
# (the same on udp with loss, default 5: 8 MiB at 5 % loss takes seconds).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$here/hosts.sh"
export FI_PROVIDER_PATH=$top/.libs
steps=${HOSTS_STEPS:-pingpong loss func mpi linkdown udp udploss}
iters=${HOSTS_ITERS:-20}
loss_iters=${HOSTS_LOSS_ITERS:-5}
pass=0 fail=0
want() { [[ " $steps " == *" $1 "* ]]; }
step() { # name, command...
  local name=$1; shift
  echo "=== $name"
  if "$@"; then echo "PASS $name"; pass=$((pass + 1))
  else echo "FAIL $name"; fail=$((fail + 1)); fi
}
[ "$(id -u)" = 0 ] || { echo "run-hosts-tests: needs root"; exit 1; }
command -v nft >/dev/null || { echo "run-hosts-tests: needs nftables"; exit 1; }
work=$(mktemp -d)
trap 'hosts_down; rm -rf "$work"' EXIT
hosts_up 2 || exit 1
echo "hosts: 1 = $(hosts_ip 1) (holder ${HOSTS_HOLDER[1]}), 2 = $(hosts_ip 2) (holder ${HOSTS_HOLDER[2]})"

port=$((20000 + RANDOM % 20000))
# fi_pingpong: server on host 1, client on host 2; both must pass
pingpong() { # fi_pingpong options...
  port=$((port + 1))
  hosts_run 1 timeout 300 fi_pingpong "$@" -B "$port" > "$work/server" 2>&1 &
  local server=$!
  # the server listens before the client starts (the client reports a
  # server that never did): fi_pingpong's own tcp socket, on every domain
  hosts_wait_listen 1 "$port" $server
  hosts_run 2 timeout 300 fi_pingpong "$@" -P "$port" "$(hosts_ip 1)" \
    > "$work/client" 2>&1
  local rc=$?
  wait $server; local src=$?
  tail -n 2 "$work/client"
  [ $rc = 0 ] && [ $src = 0 ] && return 0
  echo "client rc $rc:"; tail -n 5 "$work/client"
  echo "server rc $src:"; tail -n 5 "$work/server"
  return 1
}

if want pingpong; then
  for mode in msg tagged; do
    step "fi_pingpong -d tcp -m $mode -c across hosts" \
      pingpong -p ntx -d tcp -e rdm -m "$mode" -S all -I "$iters" -c
  done
  # no -d: the first fi_info entry (tcp, or a verbs device) reaches
  # another host; shm, which cannot, is listed last
  step "fi_pingpong, first fi_info entry, across hosts" \
    pingpong -p ntx -e rdm -m tagged -S 1024 -I "$iters" -c
fi

lossy() {
  local i
  for i in 1 2; do
    hosts_nft "$i" "ip daddr $HOSTS_NET.0/24 numgen random mod 100 < 2 drop
    ip daddr $HOSTS_NET.0/24 numgen random mod 100 < 1 dup to ip daddr device \"eth0\"" ||
      return 1
  done
}
if want loss; then
  if lossy; then
    for mode in msg tagged; do
      step "fi_pingpong -d tcp -m $mode -c across hosts, 2 % dropped, 1 % duplicated" \
        pingpong -p ntx -d tcp -e rdm -m "$mode" -S all -I "$iters" -c
    done
    # the rules really dropped packets
    hosts_run 2 nft list table ip ntxhosts | grep -q drop
  else
    step "nftables loss rules" false
  fi
  hosts_nft_clear 1; hosts_nft_clear 2
fi

if want func; then
  # the functional suite's peer process enters host 2's network: the
  # tests' messages, RMA and atomics cross the link on the tcp domain
  func() {
    hosts_run 1 env NTX_TEST_DOMAIN=tcp FI_PROVIDER=ntx \
      NTX_TEST_PEER_NETNS="$(hosts_netns 2)" timeout 900 \
      "$top/test/func/test_func" -j1 --filter "$1" > "$work/func" 2>&1
    local rc=$?
    grep -B 8 '^\[FAIL\]' "$work/func" | head -60
    grep Synthesis "$work/func"
    return $rc
  }
  [ -x "$top/test/func/test_func" ] ||
    make -C "$top" -j"$(nproc)" check TESTS= > /dev/null
  step "functional suite, peer on host 2: msg" func 'msg/*'
  step "functional suite, peer on host 2: rma" func 'rma*/*'
  step "functional suite, peer on host 2: atomics" func 'atomic*/*'
  step "functional suite, peer on host 2: job keys" func 'auth/*tcp'
fi

# the functional suite's peer process enters host 2's network: the
# tests' messages, RMA and atomics cross the link on domain $1
func_on() { # domain, filter
  hosts_run 1 env NTX_TEST_DOMAIN="$1" FI_PROVIDER=ntx \
    NTX_TEST_PEER_NETNS="$(hosts_netns 2)" timeout 900 \
    "$top/test/func/test_func" -j1 --filter "$2" > "$work/func" 2>&1
  local rc=$?
  grep -B 8 '^\[FAIL\]' "$work/func" | head -60
  grep Synthesis "$work/func"
  return $rc
}

if want udp; then
  for mode in msg tagged; do
    step "fi_pingpong -d udp -m $mode -c across hosts" \
      pingpong -p ntx -d udp -e rdm -m "$mode" -S all -I "$iters" -c
  done
  if hosts_nft 1 "ip daddr $HOSTS_NET.0/24 numgen random mod 100 < 1 dup to ip daddr device \"eth0\"" &&
     hosts_nft 2 "ip daddr $HOSTS_NET.0/24 numgen random mod 100 < 1 dup to ip daddr device \"eth0\""; then
    step "fi_pingpong -d udp -m tagged -c across hosts, 1 % duplicated" \
      pingpong -p ntx -d udp -e rdm -m tagged -S all -I "$iters" -c
  else
    step "nftables duplication rules" false
  fi
  hosts_nft_clear 1; hosts_nft_clear 2
  [ -x "$top/test/func/test_func" ] ||
    make -C "$top" -j"$(nproc)" check TESTS= > /dev/null
  step "functional suite on udp, peer on host 2: udp" func_on udp 'udp/*'
  step "functional suite on udp, peer on host 2: msg" func_on udp 'msg/*udp*'
  step "functional suite on udp, peer on host 2: rma" func_on udp 'rma*/*udp*'
  step "functional suite on udp, peer on host 2: atomics" func_on udp 'atomic*/*udp'
fi

if want udploss; then
  for pct in 1 5; do
    if hosts_nft 1 "ip daddr $HOSTS_NET.0/24 numgen random mod 100 < $pct drop" &&
       hosts_nft 2 "ip daddr $HOSTS_NET.0/24 numgen random mod 100 < $pct drop"; then
      for mode in msg tagged; do
        step "fi_pingpong -d udp -m $mode -c across hosts, $pct % dropped" \
          pingpong -p ntx -d udp -e rdm -m "$mode" -S all -I "$loss_iters" -c
      done
      # the rules really dropped packets
      hosts_run 2 nft list table ip ntxhosts | grep -q drop
    else
      step "nftables loss rules ($pct %)" false
    fi
    hosts_nft_clear 1; hosts_nft_clear 2
  done
fi

if want mpi; then
  # mpirun over the two hosts, two ranks each, through the rsh agent
  mpirun_2x2() {
    HOSTS_HOLDERS="${HOSTS_HOLDER[*]}" HOSTS_NET=$HOSTS_NET \
      timeout 300 mpirun.openmpi --allow-run-as-root -np 4 \
      --host "$(hosts_ip 1):2,$(hosts_ip 2):2" \
      --mca plm_rsh_agent "$here/rsh-agent.sh" --mca plm_rsh_no_tree_spawn 1 \
      --mca oob_tcp_if_include "$HOSTS_NET.0/24" "$@"
  }
  # Each rank's address space is capped (NTX_MPI_RANK_AS_KB, 4 GiB), so
  # that ranks retrying a refused send while their memory grows fail in
  # seconds instead of taking the machine.
  limited=(bash -c 'ulimit -v "$0" && exec "$@"' "${NTX_MPI_RANK_AS_KB:-4194304}")
  mpi() { # LEVEL [DOMAIN: FI_NTX_DOMAINS, e.g. udp]
    local dom=()
    [ -n "${2:-}" ] && dom=(-x "FI_NTX_DOMAINS=$2")
    mpicc -O2 -Wall -o "$work/mpi_msg" "$top/test/mpi/mpi_msg.c" || return 1
    mpirun_2x2 --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include ntx \
      --mca mtl_base_verbose 100 --mca mtl_ofi_verbose 100 \
      -x FI_PROVIDER=ntx -x FI_PROVIDER_PATH \
      "${dom[@]}" -x NTX_MPI_HOSTNAME=1 "${limited[@]}" "$work/mpi_msg" "$1" \
      > "$work/mpi" 2>&1
    local rc=$?
    grep -v "^\[.*mca:" "$work/mpi" | tail -n 8
    [ $rc = 0 ] && grep -q "mtl:ofi:prov: ntx" "$work/mpi" &&
      grep -q PASS "$work/mpi" &&
      { [ -z "${2:-}" ] || [ "$(grep -c "mtl:ofi:provider: $2" "$work/mpi")" = 4 ]; }
  }
  # ob1 over btl ofi (btl_ofi_mode 2: two-sided traffic too) on ntx's
  # default domain list: Open MPI spreads a host's ranks over the entries
  # alike to the first, and shm (it cannot reach the other host) must not
  # be one. Each rank's address space is capped as above.
  btl() { # PROGRAM [ARGS...]: test/mpi/PROGRAM.c
    local prog=$1; shift
    mpicc -O2 -Wall -o "$work/$prog" "$top/test/mpi/$prog.c" || return 1
    mpirun_2x2 --mca pml ob1 --mca btl ofi,self --mca btl_ofi_mode 2 \
      --mca btl_ofi_provider_include ntx --mca osc rdma \
      -x FI_PROVIDER=ntx -x FI_PROVIDER_PATH -x NTX_MPI_HOSTNAME=1 \
      "${limited[@]}" "$work/$prog" "$@" > "$work/mpi" 2>&1
    local rc=$?
    grep -v "^\[.*mca:" "$work/mpi" | grep -v "^ok " | tail -n 8
    [ $rc = 0 ] && grep -q PASS "$work/mpi"
  }
  step "Open MPI, 2 hosts x 2 ranks, ob1 + btl ofi on ntx: point-to-point" \
    btl mpi_msg multiple
  step "Open MPI, 2 hosts x 2 ranks, ob1 + btl ofi on ntx: one-sided" \
    btl mpi_osc
  step "Open MPI, 2 hosts x 2 ranks, ofi MTL on ntx, single" mpi single
  step "Open MPI, 2 hosts x 2 ranks, ofi MTL on ntx, multiple" mpi multiple
  want udp && step "Open MPI, 2 hosts x 2 ranks, ofi MTL on ntx's udp domain" \
    mpi multiple udp
fi

if want linkdown; then
  # Sets side to how a hosts_run ended: "rc N", or "running" for one
  # still running at the deadline, which is then ended (its timeout
  # process, the nsenter's child, passes the signal on). In this shell,
  # not a command substitution: only this shell can wait for it, and a
  # side that exited but is not reaped yet (a zombie) has ended.
  end_side() { # pid of a hosts_run
    if ps -o stat= -p "$1" 2>/dev/null | grep -qv '^Z'; then
      kill $(ps -o pid= --ppid "$1") 2>/dev/null; wait "$1"; side=running
    else
      wait "$1"; side="rc $?"
    fi
  }
  linkdown() { # endpoint type
    local tmo=3000 port=$((port + 7)) end client server t0 ms crc src side
    hosts_link 2 up
    hosts_run 1 env FI_NTX_TCP_TIMEOUT_MS=$tmo timeout 120 fi_pingpong -p ntx \
      -d tcp -e "$1" -m tagged -S 1048576 -I 1000000 -B "$port" \
      > "$work/server" 2>&1 &
    server=$!
    hosts_wait_listen 1 "$port" $server || return 1
    hosts_run 2 env FI_NTX_TCP_TIMEOUT_MS=$tmo timeout 120 fi_pingpong -p ntx \
      -d tcp -e "$1" -m tagged -S 1048576 -I 1000000 -P "$port" \
      "$(hosts_ip 1)" > "$work/client" 2>&1 &
    client=$!
    # in the middle of the stream: host 1 has received 64 MB
    end=$((SECONDS + 60))
    until hosts_run 1 ss -Htin state established 2>/dev/null |
          grep -o 'bytes_received:[0-9]*' |
          awk -F: '$2 > 64000000 { f = 1 } END { exit !f }'; do
      [ $SECONDS -lt $end ] || { echo "no stream"; return 1; }
      sleep 0.05 # polling for progress, bounded by the deadline
    done
    t0=$(date +%s%N)
    hosts_link 2 down
    # both sides end by FI_NTX_TCP_TIMEOUT_MS plus the kernel's next
    # keepalive probe; the bound leaves 5 s on top
    while { kill -0 $client || kill -0 $server; } 2>/dev/null &&
          [ $((($(date +%s%N) - t0) / 1000000)) -le $((tmo + 5000)) ]; do
      sleep 0.05 # polling for the ends, bounded by the deadline
    done
    ms=$((($(date +%s%N) - t0) / 1000000))
    end_side $client; crc=$side
    end_side $server; src=$side
    echo "link down: after $ms ms the client: $crc, the server: $src"
    tail -n 1 "$work/client" "$work/server"
    hosts_link 2 up
    # an error, not a time-out (124), a success or still running
    case $1 in
    msg) # a connection: its posted receives fail with it, on both sides
      [[ $crc == "rc "* && $crc != "rc 0" && $crc != "rc 124" &&
         $src == "rc "* && $src != "rc 0" && $src != "rc 124" ]] ;;
    rdm) # the side with data in flight fails; a side whose one
      # operation is a receive from any source may wait on (fi_trecv
      # without a source: another peer could still send)
      [[ ($crc == "rc "* && $crc != "rc 0" && $crc != "rc 124") ||
         ($src == "rc "* && $src != "rc 0" && $src != "rc 124") ]] &&
      [[ $crc != "rc 0" && $src != "rc 0" ]] ;;
    esac
  }
  step "a link down in the middle of a stream, MSG endpoints: both sides' error completions in time" \
    linkdown msg
  step "a link down in the middle of a stream, RDM: the sender's error completion in time" \
    linkdown rdm
fi

echo "hosts: $pass passed, $fail failed"
[ $fail = 0 ]
