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
exit $bad
