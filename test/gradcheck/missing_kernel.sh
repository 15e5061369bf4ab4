#!/usr/bin/env bash
# gradcheck.missing_kernel: a gradient check whose backward kernel the colossal-run lacks did not
# run, so run_gradcheck.py must not pass: exit 1, and 0 only with --allow-missing-kernels.
#   missing_kernel.sh PYTHON RUN_GRADCHECK_PY COLOSSAL_OPT WORKDIR
set -uo pipefail
PY=$1 SCRIPT=$2 OPT=$3 W=$4
rm -rf "$W" && mkdir -p "$W"
# A colossal-run built without the backward kernels: every plan fails to load the way it would.
cat > "$W/colossal-run" <<'FAKE'
#!/usr/bin/env bash
echo "error: plan: instruction 1: unknown op 'unary_grad' for device cpu" >&2
exit 1
FAKE
chmod +x "$W/colossal-run"
"$PY" "$SCRIPT" --only '^sin$' --skip-blocks --opt "$OPT" --run "$W/colossal-run" --workdir "$W/a" > "$W/a.log" 2>&1
rc=$?
cat "$W/a.log"
grep -q '^SKIP sin' "$W/a.log" || { echo "FAIL: the case was not reported as SKIP"; exit 1; }
[ $rc -eq 1 ] || { echo "FAIL: run_gradcheck.py exited $rc with a case that did not run (want 1)"; exit 1; }
"$PY" "$SCRIPT" --only '^sin$' --skip-blocks --opt "$OPT" --run "$W/colossal-run" --workdir "$W/b" \
  --allow-missing-kernels > "$W/b.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$W/b.log"; echo "FAIL: --allow-missing-kernels exited $rc (want 0)"; exit 1; }
echo "ok: a missing backward kernel fails the check (exit 1), and passes only with --allow-missing-kernels"
