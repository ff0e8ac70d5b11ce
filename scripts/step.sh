# Sourced by scripts/test-all.sh and test/debian13/inside.sh: step NAME
# COMMAND... runs one step, prints "PASS|FAIL $STEP_PREFIX NAME (N s)" and
# counts it in pass and fail.
pass=0 fail=0
step() {
  local name=${STEP_PREFIX:-}$1 t0=$SECONDS; shift
  echo "=== $name"
  if "$@"; then echo "PASS $name ($((SECONDS - t0)) s)"; pass=$((pass + 1))
  else echo "FAIL $name ($((SECONDS - t0)) s)"; fail=$((fail + 1)); fi
}
