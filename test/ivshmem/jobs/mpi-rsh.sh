#!/bin/bash
# Open MPI's remote shell between the guests of the ivshmem tier (mpirun
# --mca plm_rsh_agent): the guests have no ssh, so this sends the command
# line, as ssh would join it, to mpi-rsh-serve.sh on HOST's port
# MPI_RSH_PORT (busybox nc -ll -e), and copies what the command prints
# until it ends there. Usage: mpi-rsh.sh HOST COMMAND...
set -u
host=$1
shift
exec 3<> "/dev/tcp/$host/${MPI_RSH_PORT:?}" || exit 255
printf '%s\n' "$*" >&3
cat <&3
