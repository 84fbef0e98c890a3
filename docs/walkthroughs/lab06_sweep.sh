#!/usr/bin/env bash
# The experiment of docs/walkthroughs/lab06_large_batch.md: at 2 ranks x 512 per rank, global
# batches 1k, 4k, 16k and 64k (accumulation 1, 4, 16, 64), one epoch of ctr-small each, for five
# learning-rate recipes. Prints one markdown table row per run (test AUC on the whole test split,
# the mean training loss of the epoch's last tenth, epoch time, gradient syncs, bytes per sample).
#   docs/walkthroughs/lab06_sweep.sh [build/solutions/bin] [data/ctr-small] [out folder]
# Takes about 20 minutes on the 2-core reference machine.
# Knobs (environment): KS (accumulation steps, "1 4 16 64"), RECIPES (a subset of the five).
set -euo pipefail
BIN=${1:-build/solutions/bin}
DATA=${2:-data/ctr-small}
OUT=${3:-runs/lab06_sweep}
mkdir -p "$OUT"
failed=()  # runs that exited non-zero: the table shows them, and the script fails
# recipe name -> flags; the warm-up is a tenth of the epoch's optimizer steps (at least one).
recipes=(none linear linear_warmup sqrt linear_emb_none)
flags_of() {
  case $1 in
    none) echo "--lr-rule none" ;;
    linear) echo "--lr-rule linear" ;;
    linear_warmup) echo "--lr-rule linear --warmup-steps $2" ;;
    sqrt) echo "--lr-rule sqrt" ;;
    linear_emb_none) echo "--lr-rule linear --embedding-rule none" ;;
  esac
}
for k in ${KS:-1 4 16 64}; do
  steps=$((1000000 / (2 * 512 * k)))
  warm=$((steps / 10 > 0 ? steps / 10 : 1))
  for r in ${RECIPES:-${recipes[@]}}; do
    name=k${k}_$r
    # shellcheck disable=SC2046
    "$BIN/ddplab" launch -n 2 --backend c10d -- "$BIN/lab06_large_batch" --data "$DATA" --batch 512 --accumulate "$k" \
      $(flags_of "$r" "$warm") --log-every 0 --report "$OUT/$name.rank{rank}.json" > "$OUT/$name.log" 2>&1 || failed+=("$name")
    echo "$name done" >&2
  done
done
python3 - "$OUT" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
print("| global batch | recipe | dense lr (target) | emb lr | warm-up | test AUC | train loss, last 10 % | epoch s | syncs | bytes/sample |")
print("|---|---|---|---|---|---|---|---|---|---|")
rows = []
for f in glob.glob(os.path.join(out, "*.rank0.json")):
    r = json.load(open(f))
    lb = r.get("large_batch", {})
    name = os.path.basename(f).split(".")[0]
    k = int(name.split("_")[0][1:])
    losses = r["steps"]["loss"]  # per micro-step, this rank's micro-batch
    tail = losses[-max(1, len(losses) // 10):] if losses else []
    auc = (r.get("eval") or {}).get("auc")
    ep = (r.get("epochs") or [{}])[0].get("seconds")
    t = lb.get("target_lr", {})
    rows.append((lb.get("global_batch", 0), name, t.get("dense"), t.get("embeddings"), lb.get("warmup_steps"),
                 auc, sum(tail) / len(tail) if tail else None, ep, lb.get("syncs"), lb.get("bytes_per_sample")))
fmt = lambda v, f: ("n/a" if v is None else format(v, f))
for g, n, d, e, w, auc, loss, ep, s, b in sorted(rows, key=lambda x: (x[0], x[1])):
    print(f"| {g} | {n.split('_', 1)[1]} | {fmt(d, '.4g')} | {fmt(e, '.4g')} | {w} | {fmt(auc, '.4f')} | {fmt(loss, '.4f')} | {fmt(ep, '.1f')} | {fmt(s, '.0f')} | {fmt(b, '.0f')} |")
EOF
if ((${#failed[@]})); then
  echo "${#failed[@]} run(s) failed: ${failed[*]} (their logs: $OUT/<name>.log)" >&2
  exit 1
fi
