#!/usr/bin/env bash
# The scaling experiments of docs/walkthroughs/lab03_sampler.md ("The numbers"), on ctr-small: lab
# 03's reference at 1, 2 and 4 ranks, and 2 ranks before the fixes, over Gloo and over Open MPI, with
# torch's Adam and with the kit's one-pass Adam, beside two independent 1-rank jobs (the machine's
# cap). Every configuration once, then all of them again (REPS rounds), so that a slow minute of a
# shared machine does not land on one row. Prints the two tables' figures, one row per run.
#   docs/walkthroughs/lab03_sweep.sh [build/solutions/bin] [data/ctr-small] [out folder]
# Takes about 4 minutes on the 2-core reference machine. Knobs (environment): TRAIN_SAMPLES
# (200000), EVAL (test samples, 100000), REPS (2).
set -euo pipefail
BIN=${1:-build/solutions/bin}
DATA=${2:-data/ctr-small}
OUT=${3:-runs/lab03_sweep}
mkdir -p "$OUT"
lab=("$BIN/lab03_sampler" --data "$DATA" --train-samples "${TRAIN_SAMPLES:-200000}" --eval-samples "${EVAL:-100000}"
  --threads 1 --log-every 0)
failed=()  # runs that exited non-zero: the table shows them, and the script fails
run() {  # run <name> <command...>: the lab's flags and --report are appended
  local name=$1
  shift
  "$@" "${lab[@]:1}" --report "$OUT/$name.rank{rank}.json" > "$OUT/$name.log" 2>&1 || failed+=("$name")
  echo "$name done" >&2
}
for ((r = 1; r <= ${REPS:-2}; r++)); do
  run "r${r}_1_fused" "${lab[0]}"
  run "r${r}_1_torch" "${lab[0]}" --adam torch
  run "r${r}_2_before" env DDPLAB_GLOO_IO=normal DDPLAB_BIND=none "$BIN/ddplab" launch -n 2 --backend c10d -- "${lab[0]}" --adam torch
  run "r${r}_2_gloo_torch" "$BIN/ddplab" launch -n 2 --backend c10d -- "${lab[0]}" --adam torch
  run "r${r}_2_default_torch" "$BIN/ddplab" launch -n 2 -- "${lab[0]}" --adam torch
  run "r${r}_2_gloo_fused" "$BIN/ddplab" launch -n 2 --backend c10d -- "${lab[0]}"
  run "r${r}_2_default_fused" "$BIN/ddplab" launch -n 2 -- "${lab[0]}"
  # Two 1-rank jobs at once, a core each: what two processes can do on this machine.
  ( taskset -c 0 "${lab[@]}" --report "$OUT/r${r}_cap0.rank{rank}.json" > "$OUT/r${r}_cap0.log" 2>&1 &
    taskset -c 1 "${lab[@]}" --report "$OUT/r${r}_cap1.rank{rank}.json" > "$OUT/r${r}_cap1.log" 2>&1
    wait ) || failed+=("r${r}_cap")
  echo "r${r}_cap done" >&2
  run "r${r}_4_default_fused" "$BIN/ddplab" launch -n 4 -- "${lab[0]}"
done
PYTHONPATH="$(dirname "$0")${PYTHONPATH:+:$PYTHONPATH}" python3 - "$OUT" "${REPS:-2}" <<'EOF'
import functools, sys
import sweep_reports
out, reps = sys.argv[1], int(sys.argv[2])
reports = functools.partial(sweep_reports.reports, out)  # every rank's report of a run
def rate(r):  # the job's unique samples/s: every rank's unique samples over the slowest rank's epoch
    return sum(x["samples"]["unique"] for x in r) / max(x["epochs"][0]["seconds"] for x in r)
print("| round | run | ranks | transport | epoch s | unique samples/s | efficiency (vs the 1-rank run, same Adam) | comm | optimizer | test AUC |")
print("|---|---|---|---|---|---|---|---|---|---|")
for i in range(1, reps + 1):
    one = {a: reports(f"r{i}_1_{a}") for a in ("fused", "torch")}
    for name in ("1_fused", "1_torch", "2_before", "2_gloo_torch", "2_default_torch", "2_gloo_fused", "2_default_fused",
                 "cap", "4_default_fused"):
        r = reports(f"r{i}_{name}") if name != "cap" else reports(f"r{i}_cap0") + reports(f"r{i}_cap1")
        if not r or any(x["status"] != "ok" for x in r):
            print(f"| {i} | {name} | failed: see {out}/r{i}_{name}*.log |"); continue
        base = one["torch" if name.endswith("torch") or name == "2_before" else "fused"]
        if name == "cap":  # two jobs: their rates add up
            total = sum(rate([x]) for x in r)
        else:
            total = rate(r)
        eff = total / (len(r) * rate(base)) if base and base[0]["status"] == "ok" else float("nan")
        p = r[0]["phases"]
        print(f"| {i} | {name} | {len(r)} | {r[0]['backend'] if r[0]['world_size'] > 1 else 'alone'} | {max(x['epochs'][0]['seconds'] for x in r):.1f} | "
              f"{total:,.0f} | {eff:.3f} | {100 * p['comm'] / p['wall']:.0f} % | {100 * p['optimizer'] / p['wall']:.0f} % | "
              f"{r[0]['eval']['auc']:.4f} |")
EOF
if ((${#failed[@]})); then
  echo "${#failed[@]} run(s) failed: ${failed[*]} (their logs: $OUT/<name>.log)" >&2
  exit 1
fi
