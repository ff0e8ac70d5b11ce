#!/bin/bash
# mpirun's rsh agent for test/hosts: "rsh-agent.sh HOST COMMAND..." runs
# COMMAND on the namespace host whose address is HOST. HOSTS_NET and
# HOSTS_HOLDERS (holder pids of hosts 1..N, from hosts.sh) come from the
# caller's environment.
host=$1; shift
i=${host##*.}
read -r -a holders <<< "${HOSTS_HOLDERS:?}"
[ "${host%.*}" = "${HOSTS_NET:?}" ] && [ -n "${holders[$((i - 1))]:-}" ] ||
  { echo "rsh-agent: unknown host $host" >&2; exit 1; }
exec nsenter -t "${holders[$((i - 1))]}" --net --pid --mount --uts -- sh -c "$*"
