#!/bin/sh
# The other end of mpi-rsh.sh, run by busybox nc -ll -e for each
# connection: the first line is a command line for sh; its output goes
# back on the connection, and the connection ends when it does.
read -r cmd || exit 255
exec /bin/sh -c "$cmd" 2>&1
