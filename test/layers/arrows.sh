#!/bin/bash
# The arrows between ntx's layers, read from the built objects (DESIGN §2):
# for each layer's convenience library, the symbols it uses that another
# layer defines. Allowed: api -> engine, core; engine -> core;
# backend -> core. Any other arrow (one that runs up, or engine <->
# backend, which talk only through registered ops) fails the check.
set -uo pipefail
top=${NTX_BUILDDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
libs=$top/.libs
layers=(core backend engine api)
declare -A allowed=([api:engine]=1 [api:core]=1 [engine:core]=1
		    [backend:core]=1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for l in "${layers[@]}"; do
  a=$libs/libntx_$l.a
  [ -f "$a" ] || { echo "arrows: $a not built"; exit 1; }
  nm -g --defined-only "$a" | awk 'NF == 3 && $2 != "U" {print $3}' |
    sort -u > "$tmp/def.$l"
  nm -u "$a" | awk '{print $NF}' | sort -u > "$tmp/und.$l"
done
bad=0
for from in "${layers[@]}"; do
  for to in "${layers[@]}"; do
    [ "$from" = "$to" ] && continue
    syms=$(comm -12 "$tmp/und.$from" "$tmp/def.$to")
    [ -n "$syms" ] || continue
    n=$(wc -l <<< "$syms")
    if [ -n "${allowed[$from:$to]:-}" ]; then
      echo "ok   $from -> $to ($n symbols)"
    else
      echo "BAD  $from -> $to: $(tr '\n' ' ' <<< "$syms")"
      bad=1
    fi
  done
done
[ $bad = 0 ] && echo "arrows: every arrow points down" ||
  echo "arrows: an arrow runs up (or sideways); see DESIGN §2"

# Inside the ntb back end (DESIGN §4): the ring protocol (conn, rx, tx)
# reaches its window only through struct ntx_ntb_win_ops, never a
# function of the shm window, its peers' liveness or its services
# (ntx_ntb_win_shm.c, ntx_ntb_win_pci.c, ntx_ntb_region.c,
# ntx_ntb_peer.c, ntx_ntb_svc.c), nor a system call
# that obtains, maps, rings or copies through a window. The one name it
# shares with them is the membarrier registration the data bell reads.
a=$libs/libntx_backend.a
for f in win_shm win_pci region peer svc; do
  ar p "$a" libntx_backend_la-ntx_ntb_$f.o > "$tmp/win.o"
  nm -g --defined-only "$tmp/win.o" | awk 'NF == 3 {print $3}' |
    grep -vx 'ntx_ntb_mb_registered' >> "$tmp/win.def"
done
printf '%s\n' memfd_create ftruncate fcntl mmap munmap madvise fallocate \
  syscall process_vm_readv process_vm_writev pidfd_open pidfd_getfd \
  socket bind sendto recv epoll_ctl epoll_wait >> "$tmp/win.def"
sort -u -o "$tmp/win.def" "$tmp/win.def"
for f in conn rx tx; do
  m=libntx_backend_la-ntx_ntb_$f.o
  if ! ar p "$a" "$m" > "$tmp/$f.o" 2> /dev/null || [ ! -s "$tmp/$f.o" ]; then
    echo "BAD  ntb ring: $m is not in $a"
    bad=1
    continue
  fi
  syms=$(nm -u "$tmp/$f.o" | awk '{print $NF}' | sort -u |
	 comm -12 - "$tmp/win.def")
  if [ -n "$syms" ]; then
    echo "BAD  ntb ring $f -> shm window: $(tr '\n' ' ' <<< "$syms")"
    bad=1
  else
    echo "ok   ntb ring $f -> window only through ntx_ntb_win_ops"
  fi
done
exit $bad
