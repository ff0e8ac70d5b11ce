# Sourced by scripts/test-all.sh and test/debian13/inside.sh: step NAME
# COMMAND... runs one step, prints its output and "PASS|FAIL $STEP_PREFIX
# NAME (N s)" and counts it in pass and fail. step_failures, at the end,
# prints again what each failed step said about its failure (the lines
# with FAIL and those before them, then its last lines), so that the end
# of a long log names the cause and not only the step.
pass=0 fail=0
step_dir=$(mktemp -d "${TMPDIR:-/tmp}/ntx-steps.XXXXXX")
step_failed=()
step() {
  local name=${STEP_PREFIX:-}$1 t0=$SECONDS rc out; shift
  out=$step_dir/$((pass + fail)).log
  echo "=== $name"
  # into a file, not a pipe: a daemon a step leaves behind holding its
  # output cannot keep the step from ending
  "$@" > "$out" 2>&1; rc=$?
  cat "$out"
  if [ $rc = 0 ]; then echo "PASS $name ($((SECONDS - t0)) s)"; pass=$((pass + 1)); rm -f "$out"
  else echo "FAIL $name ($((SECONDS - t0)) s)"; fail=$((fail + 1)); step_failed+=("$name|$out"); fi
}
step_failures() {
  local f name out
  for f in ${step_failed[@]+"${step_failed[@]}"}; do
    name=${f%%|*} out=${f##*|}
    echo "===== failed: $name"
    echo "----- its lines with FAIL, and the 25 before each (at most 120 lines):"
    grep -a -B25 -E '(^|[^A-Za-z_])FAIL([^A-Za-z_]|$)' "$out" | head -120
    echo "----- its last 40 lines:"
    tail -n 40 "$out"
  done
  rm -rf "$step_dir"
}
