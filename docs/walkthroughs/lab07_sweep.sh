#!/usr/bin/env bash
# The experiments of docs/walkthroughs/lab07_model_parallel.md, on ctr-small:
#  1. speed at D = 16: data parallel on 1 and 2 ranks, the layer split, the pipeline at m = 2, 4
#     and 8, table-wise sharding, recomputation - one epoch of --train-samples each at a batch of
#     512 per step (per rank for data parallel and sharding), Adam;
#  2. memory and speed at D = 16, 64 and 256: data parallel, data parallel with recomputation and
#     table-wise sharding on 2 ranks, a few steps each.
# Prints two markdown tables (figures from each run's report; samples/s counts unique samples of
# the job: the split's two stages train on the same batch).
#   docs/walkthroughs/lab07_sweep.sh [build/solutions/bin] [data/ctr-small] [out folder]
# Takes about 6 minutes on the 2-core reference machine.
# Knobs (environment): TRAIN_SAMPLES (131072), EVAL (test samples, 20000), PARTS, DIMS ("16 64 256").
set -euo pipefail
BIN=${1:-build/solutions/bin}
DATA=${2:-data/ctr-small}
OUT=${3:-runs/lab07_sweep}
N=${TRAIN_SAMPLES:-131072}
PARTS=${PARTS:-speed memory}  # PARTS=memory runs the second experiment only
DIMS=${DIMS:-16 64 256}       # the embedding widths of the second
mkdir -p "$OUT"
failed=()  # runs that exited non-zero: the table shows them, and the script fails
run() {  # run <name> <ranks> <flags...>; EVAL: test samples evaluated
  local name=$1 ranks=$2
  shift 2
  "$BIN/ddplab" launch -n "$ranks" -- "$BIN/lab07_model_parallel" --data "$DATA" --eval-samples "${EVAL:-20000}" \
    --log-every 0 "$@" --report "$OUT/$name.rank{rank}.json" > "$OUT/$name.log" 2>&1 || failed+=("$name")
  echo "$name done" >&2
}
if [[ " $PARTS " == *" speed "* ]]; then
  run dp_1 1 --batch 512 --train-samples "$N"
  run dp_2 2 --batch 512 --train-samples "$N"
  run split_2 2 --mode split --batch 512 --train-samples "$N"
  for m in 2 4 8; do run pipeline_m${m} 2 --mode pipeline --micro-batches "$m" --batch 512 --train-samples "$N"; done
  run sharded_2 2 --mode sharded --batch 512 --train-samples "$N"
  run recompute_1 1 --recompute --batch 512 --train-samples "$N"
fi
if [[ " $PARTS " == *" memory "* ]]; then
  for d in $DIMS; do
    EVAL=1000 run mem_dp_d$d 2 --embedding-dim "$d" --batch 512 --train-samples 8192 --max-steps 5
    EVAL=1000 run mem_dprec_d$d 2 --embedding-dim "$d" --recompute --batch 512 --train-samples 8192 --max-steps 5
    EVAL=1000 run mem_dpbf16_d$d 2 --embedding-dim "$d" --autocast --recompute --batch 512 --train-samples 8192 \
      --max-steps 5
    EVAL=1000 run mem_sharded_d$d 2 --mode sharded --embedding-dim "$d" --batch 512 --train-samples 8192 --max-steps 5
  done
fi
# shellcheck disable=SC2086
PYTHONPATH="$(dirname "$0")${PYTHONPATH:+:$PYTHONPATH}" python3 - "$OUT" $DIMS <<'EOF'
import functools, sys
import sweep_reports
out = sys.argv[1]
reports = functools.partial(sweep_reports.reports, out)  # every rank's report of a run
def mib(b):
    return f"{b / 2**20:.1f}"
print("| run | ranks | unique samples/s | step ms (median) | idle per rank | bytes per step (rank 0 sends) | test AUC |")
print("|---|---|---|---|---|---|---|")
for name in ["dp_1", "dp_2", "split_2", "pipeline_m2", "pipeline_m4", "pipeline_m8", "sharded_2", "recompute_1"]:
    r = reports(name)
    if not r or r[0]["status"] != "ok":
        print(f"| {name} | failed: see {out}/{name}.log |"); continue
    mp = r[0]["model_parallel"]
    wall = max(x["epochs"][0]["seconds"] for x in r)
    unique = r[0]["epochs"][0]["samples"] * (1 if mp["mode"] in ("split", "pipeline") else len(r))
    ops = r[0]["comm"]["ops"]
    steps = mp["steps"]
    sent = {"split": "send", "pipeline": "send", "sharded": "all_to_all", "dp": "allreduce"}[mp["mode"]]
    per = ops.get(sent, {}).get("bytes", 0) / steps if steps else 0
    if mp["mode"] == "sharded":
        per = mp["all_to_all"]["mean_each_direction"] * 2
        sent = "all_to_all, both directions, leaving the rank"
    if mp["mode"] == "dp" and len(r) == 1:
        sent, per = "none", 0
    idle = ", ".join(f"{100 * v:.0f} %" for v in mp["idle_fraction"])
    auc = r[0].get("eval", {}).get("auc", float("nan"))
    print(f"| {name} | {len(r)} | {unique / wall:,.0f} | {mp['step_ms_median'][0]:.1f} | {idle} | {per:,.0f} ({sent}) | {auc:.4f} |")
print()
print("| D | run | peak tensor MiB per rank (rank 0, rank 1) | parameters MiB (rank 0) | optimizer state MiB | activations held MiB | step ms (median) |")
print("|---|---|---|---|---|---|---|")
for d in map(int, sys.argv[2:]):
    for kind, label in (("dp", "data parallel"), ("dprec", "data parallel + recompute"),
                        ("dpbf16", "data parallel + bf16 autocast + recompute"), ("sharded", "table-wise sharded")):
        r = reports(f"mem_{kind}_d{d}")
        if not r or r[0]["status"] != "ok":
            print(f"| {d} | {label} | failed |"); continue
        m = r[0]["model_parallel"]["memory"]
        print(f"| {d} | {label} | {', '.join(mib(p) for p in m['peak_bytes'])} | {mib(m['parameter_bytes'])} | "
              f"{mib(m['optimizer_state_bytes'])} | {mib(m['activations_bytes'][0])} | {r[0]['model_parallel']['step_ms_median'][0]:.0f} |")
EOF
if ((${#failed[@]})); then
  echo "${#failed[@]} run(s) failed: ${failed[*]} (their logs: $OUT/<name>.log)" >&2
  exit 1
fi
