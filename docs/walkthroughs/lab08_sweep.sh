#!/usr/bin/env bash
# The experiment of docs/walkthroughs/lab08_input_pipeline.md, on ctr-small: DeepFM trained from
# Criteo-layout text (the training split exported once with `ddplab data export tsv`) parsed on the
# training thread, prefetched by 1 and 2 workers, and from the binary shards; at 1 and 2 ranks
# (each rank its byte range, or every rank parsing the whole file); and at 1 rank with 2 compute
# threads, where a prefetch worker has no idle core. --max-steps steps of 512 per rank each, Adam.
# Prints a markdown table from the runs' reports.
#   docs/walkthroughs/lab08_sweep.sh [build/solutions/bin] [data/ctr-small] [out folder]
# Takes about 6 minutes on the 2-core reference machine (STEPS=300).
# Knobs (environment): STEPS (300).
set -euo pipefail
BIN=${1:-build/solutions/bin}
DATA=${2:-data/ctr-small}
OUT=${3:-runs/lab08_sweep}
STEPS=${STEPS:-300}
mkdir -p "$OUT"
failed=()  # runs that exited non-zero: the table shows them, and the script fails
TEXT="$OUT/train.tsv"
[[ -f "$TEXT" ]] || "$BIN/ddplab" data export tsv "$DATA" --out "$TEXT"
run() {  # run <name> <ranks> <flags...>
  local name=$1 ranks=$2
  shift 2
  "$BIN/ddplab" launch -n "$ranks" -- "$BIN/lab08_input_pipeline" --data "$DATA" --eval-samples 1000 \
    --log-every 0 --batch 512 --max-steps "$STEPS" "$@" --report "$OUT/$name.rank{rank}.json" > "$OUT/$name.log" 2>&1 || failed+=("$name")
  echo "$name done" >&2
}
for r in 1 2; do
  run text_sync_$r $r --text "$TEXT" --loader sync
  [[ $r == 2 ]] && run text_sync_all_$r $r --text "$TEXT" --loader sync --read all
  run text_prefetch_w1_$r $r --text "$TEXT" --loader prefetch --workers 1
  run text_prefetch_w2_$r $r --text "$TEXT" --loader prefetch --workers 2
  run binary_$r $r --source binary
done
run text_sync_1_t2 1 --text "$TEXT" --loader sync --threads 2
run text_prefetch_w1_1_t2 1 --text "$TEXT" --loader prefetch --workers 1 --threads 2
run binary_1_t2 1 --source binary --threads 2
PYTHONPATH="$(dirname "$0")${PYTHONPATH:+:$PYTHONPATH}" python3 - "$OUT" <<'PY'
import functools, sys
import sweep_reports
out = sys.argv[1]
reports = functools.partial(sweep_reports.reports, out)  # every rank's report of a run
rows = [("text_sync_1", "text, parsed on the training thread", 1, 1),
        ("text_prefetch_w1_1", "text, prefetched by 1 worker", 1, 1),
        ("text_prefetch_w2_1", "text, prefetched by 2 workers", 1, 1),
        ("binary_1", "binary shards", 1, 1),
        ("text_sync_2", "text, parsed on the training thread, byte ranges", 2, 1),
        ("text_sync_all_2", "text, parsed on the training thread, every rank the whole file", 2, 1),
        ("text_prefetch_w1_2", "text, prefetched by 1 worker a rank, byte ranges", 2, 1),
        ("text_prefetch_w2_2", "text, prefetched by 2 workers a rank, byte ranges", 2, 1),
        ("binary_2", "binary shards", 2, 1),
        ("text_sync_1_t2", "text, parsed on the training thread", 1, 2),
        ("text_prefetch_w1_1_t2", "text, prefetched by 1 worker", 1, 2),
        ("binary_1_t2", "binary shards", 1, 2)]
print("| input | ranks | compute threads | samples/s (job) | step median (ms) | data wait (ms/step) | busy (lowest rank) | bytes read before training (rank 0) |")
print("|---|---|---|---|---|---|---|---|")
for name, what, ranks, threads in rows:
    reps = reports(name)
    if len(reps) != ranks or any(r.get("status") != "ok" for r in reps):
        print(f"| {what} | {ranks} | {threads} | failed: see {name}.log | | | | |")
        continue
    rate = sum(r["phases"]["steps"] * 512 / r["phases"]["wall"] for r in reps)
    med = max(r["phases"]["step_median"] for r in reps) * 1e3
    wait = max(r["phases"]["data_wait"] / r["phases"]["steps"] for r in reps) * 1e3
    busy = min(r["phases"]["compute"] / r["phases"]["wall"] for r in reps)
    inp = reps[0].get("input", {})
    read = f'{inp["bytes_read_before_training"] / 1e6:.1f} MB of {inp["file_bytes"] / 1e6:.1f}' if "file_bytes" in inp else "—"
    print(f"| {what} | {ranks} | {threads} | {rate:,.0f} | {med:.1f} | {wait:.2f} | {busy:.3f} | {read} |")
PY
if ((${#failed[@]})); then
  echo "${#failed[@]} run(s) failed: ${failed[*]} (their logs: $OUT/<name>.log)" >&2
  exit 1
fi
