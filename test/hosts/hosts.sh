#!/bin/bash
# Hosts on one machine (sourced by run-hosts-tests.sh and bench/hosts.sh).
#
# A host is a network, pid, mount and uts namespace of its own: the same
# kernel, but /proc, abstract sockets and addresses of its own, as two
# containers or two machines see them. Its eth0 is one end of a veth pair
# whose other end sits on a bridge in the initial namespace; host i has
# 10.79.0.i/24 and the bridge 10.79.0.254 (the launcher's address for
# mpirun). A holder process (pid 1 of the host) keeps the namespaces;
# hosts_run enters them with nsenter. Needs root.
#
#   hosts_up N        make hosts 1..N (HOSTS_PREFIX names them)
#   hosts_run I CMD   run CMD on host I (environment passed through)
#   hosts_wait_listen I PORT [PID]  until host I listens on PORT
#   hosts_ip I        host I's address
#   hosts_netns I     host I's network namespace, as a file
#   hosts_nft I RULES nftables rules in host I's output path (table ip)
#   hosts_link I up|down   host I's cable
#   hosts_down        remove everything hosts_up made
HOSTS_PREFIX=${HOSTS_PREFIX:-nx$$}
HOSTS_NET=10.79.0
declare -a HOSTS_HOLDER=()

hosts_ip() { echo "$HOSTS_NET.$1"; }

# The pid (in our namespace) of pid 1 of the namespace that unshare $1
# made: unshare --fork's only child.
hosts_child_of() {
  local end=$((SECONDS + 10)) c
  while [ $SECONDS -lt $end ]; do
    c=$(cat "/proc/$1/task/$1/children" 2>/dev/null)
    [ -n "$c" ] && { echo "${c%% *}"; return 0; }
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.05 # polling for the child to exist, bounded by the deadline
  done
  return 1
}

hosts_up() {
  local n=$1 i ns br=${HOSTS_PREFIX}br u
  ip link add "$br" type bridge || return 1
  ip addr add "$HOSTS_NET.254/24" dev "$br"
  ip link set "$br" up
  # every network namespace first: a host's mount namespace then holds
  # the /run/netns names of all of them (NTX_TEST_PEER_NETNS)
  for ((i = 1; i <= n; i++)); do
    ns=${HOSTS_PREFIX}h$i
    ip netns add "$ns" || return 1
    HOSTS_HOLDER[$i]=none
    ip link add "${HOSTS_PREFIX}v$i" type veth peer name eth0 netns "$ns" ||
      return 1
    ip link set "${HOSTS_PREFIX}v$i" master "$br" up
    ip -n "$ns" addr add "$HOSTS_NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  for ((i = 1; i <= n; i++)); do
    # the host's own pid, mount and uts namespaces, held by pid 1
    ip netns exec "${HOSTS_PREFIX}h$i" unshare --pid --fork --mount-proc \
      --uts --mount sh -c "hostname ${HOSTS_PREFIX}h$i; exec sleep infinity" > /dev/null 2>&1 &
    u=$!
    HOSTS_HOLDER[$i]=$(hosts_child_of "$u") || { echo "host $i: no holder"; return 1; }
  done
  # every host answers before anything runs on them
  for ((i = 2; i <= n; i++)); do
    hosts_wait_reach 1 "$HOSTS_NET.$i" || return 1
  done
}

hosts_netns() { echo "/run/netns/${HOSTS_PREFIX}h$1"; }

# Waits (bounded) until host $1 reaches address $2 (ARP and the bridge
# settle after the links come up).
hosts_wait_reach() {
  local end=$((SECONDS + 20)) out
  while [ $SECONDS -lt $end ]; do
    # a refused connect is an answer too
    out=$(hosts_run "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) &&
      return 0
    case $out in *refused*) return 0;; esac
    sleep 0.1 # polling reachability, bounded by the deadline
  done
  echo "host $1 cannot reach $2"
  return 1
}

# Waits (bounded, 30 s) until something listens on TCP port $2 of host
# $1; gives up early when process $3 (the server, if given) is gone.
hosts_wait_listen() {
  local end=$((SECONDS + 30))
  until hosts_run "$1" ss -Hltn "sport = :$2" 2>/dev/null | grep -q .; do
    [ $SECONDS -lt $end ] || return 1
    [ -z "${3:-}" ] || kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05 # polling for the listener, bounded by the deadline
  done
}

hosts_run() {
  local i=$1; shift
  nsenter -t "${HOSTS_HOLDER[$i]}" --net --pid --mount --uts -- "$@"
}

hosts_nft() { # host, rules for the output hook of its own table
  local i=$1; shift
  hosts_run "$i" nft -f - <<EOF
table ip ntxhosts
flush table ip ntxhosts
table ip ntxhosts {
  chain out {
    type filter hook output priority 0; policy accept;
    $*
  }
}
EOF
}

hosts_nft_clear() {
  hosts_run "$1" nft delete table ip ntxhosts 2>/dev/null
  return 0
}

hosts_link() { ip -n "${HOSTS_PREFIX}h$1" link set eth0 "$2"; }

hosts_down() {
  local i
  for i in "${!HOSTS_HOLDER[@]}"; do
    # pid 1 of a namespace ignores SIGTERM
    [ "${HOSTS_HOLDER[$i]}" != none ] && kill -KILL "${HOSTS_HOLDER[$i]}" 2>/dev/null
    ip netns del "${HOSTS_PREFIX}h$i" 2>/dev/null
  done
  HOSTS_HOLDER=()
  ip link del "${HOSTS_PREFIX}br" 2>/dev/null
  wait 2>/dev/null
  return 0
}
