#!/bin/bash
# Compare a `make dist` tarball with the files git tracks, both ways:
#  - every tracked file must be in the tarball, except the allow-list below;
#  - every file in the tarball must be tracked or made by autotools
#    (configure, Makefile.in, build-aux/, m4/ ...): no objects, binaries,
#    logs or stray files from the source tree;
#  - what git has executable (the runners) is executable in the tarball.
# Usage: test/dist/check-dist.sh TARBALL [SRCDIR]   (SRCDIR: a git checkout,
# default the one this script is in). scripts/test-all.sh runs it after
# make distcheck.
set -euo pipefail
tarball=${1:?usage: $0 TARBALL [SRCDIR]}
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
if ! git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-dist: $src is not a git checkout; nothing to compare with" >&2
  exit 77
fi
# tracked files that stay out of the tarball, on purpose
not_shipped='^(\.gitignore)$'
# files in the tarball that git does not track: what autoreconf makes
generated='^(configure|Makefile\.in|aclocal\.m4|config\.h\.in|build-aux/.*|m4/.*)$'

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git -C "$src" ls-files | LC_ALL=C sort > "$tmp/tracked"
# the tarball's files (not directories), without the leading ntx-VERSION/
tar -tf "$tarball" | grep -v '/$' | sed 's|^[^/]*/||' |
  LC_ALL=C sort > "$tmp/shipped"
[ -s "$tmp/shipped" ] || { echo "check-dist: no file in $tarball" >&2; exit 1; }

# executable files: git's mode 100755 must stay executable in the tarball
git -C "$src" ls-files -s | awk '$1 == "100755" { print $4 }' | LC_ALL=C sort > "$tmp/exec"
tar -tvf "$tarball" | awk '$1 ~ /^-..x/ { print $NF }' | sed 's|^[^/]*/||' |
  LC_ALL=C sort > "$tmp/shipped-exec"

fail=0
missing=$(LC_ALL=C comm -23 "$tmp/tracked" "$tmp/shipped" | grep -Ev "$not_shipped" || true)
extra=$(LC_ALL=C comm -13 "$tmp/tracked" "$tmp/shipped" | grep -Ev "$generated" || true)
if [ -n "$missing" ]; then
  echo "check-dist: tracked but not in $tarball (add to EXTRA_DIST or NTX_DIST_DIRS in Makefile.am):"
  printf '  %s\n' $missing
  fail=1
fi
not_exec=$(LC_ALL=C comm -23 "$tmp/exec" "$tmp/shipped-exec" | grep -Fxf "$tmp/shipped" || true)
if [ -n "$not_exec" ]; then
  echo "check-dist: executable in git but not in $tarball:"
  printf '  %s\n' $not_exec
  fail=1
fi
if [ -n "$extra" ]; then
  echo "check-dist: in $tarball but neither tracked nor made by autotools (build products?):"
  printf '  %s\n' $extra
  fail=1
fi
[ $fail = 0 ] && echo "check-dist: $tarball carries every tracked file but the allow-list" \
  "($(wc -l < "$tmp/tracked") tracked), with their modes, and nothing else but autotools' files"
exit $fail
