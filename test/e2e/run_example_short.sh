#!/usr/bin/env bash
# examples/run_example.sh with fewer steps than its default warm-up (50) and a prompt that needs
# shell quoting: the run must succeed (warm-up scaled to min(50, steps/10)), and the echoed sample
# command, pasted back into a shell, must pass the prompt unchanged (--tokens 0 prints it alone).
#   run_example_short.sh OUT_DIR COLOSSAL_OPT COLOSSAL_RUN
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$1"
LOG="$OUT.log"
PROMPT="It's a \"quoted\" prompt"
bash "$ROOT/examples/run_example.sh" --steps 20 --tokens 0 --prompt "$PROMPT" --out "$OUT" --opt "$2" --run "$3" \
  > "$LOG" 2>&1 || { cat "$LOG"; echo "FAIL: run_example.sh --steps 20 failed"; exit 1; }
grep -q "warmup_steps: 2, total_steps: 20" "$LOG" || { cat "$LOG"; echo "FAIL: warm-up not scaled"; exit 1; }
CMD=$(grep -E '^\$ .* sample ' "$LOG" | sed 's/^\$ //')
[ -n "$CMD" ] || { cat "$LOG"; echo "FAIL: no echoed sample command"; exit 1; }
# --tokens 0: the sample prints the prompt alone, so the pasted command must print it unchanged.
GOT=$(eval "$CMD")
[ "$GOT" = "$PROMPT" ] || { echo "FAIL: the echoed command printed '$GOT', not the prompt '$PROMPT'"; exit 1; }
echo "OK: 20 steps, warm-up 2; echoed command reproduces: $GOT"
