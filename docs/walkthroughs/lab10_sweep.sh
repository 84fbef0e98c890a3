#!/bin/bash
# Lab 10's measurements (docs/walkthroughs/lab10_sharding.md): each --shard mode at 1, 2 and 3
# ranks on ctr-small, 30 steps of 512 samples a rank, then the walkthrough's table from rank 0's
# reports. Run from the repository root after ./kit main (BIN=build/labs/bin for your own code).
set -euo pipefail
BIN=${BIN:-build/solutions/bin}
OUT=${OUT:-runs/lab10_sweep}
for n in 1 2 3; do
  for m in none zero1 zero2; do
    rm -rf "$OUT/$m-$n" && mkdir -p "$OUT/$m-$n"
    "$BIN/ddplab" launch -n "$n" -- "$BIN/lab10_sharding" --data data/ctr-small --train-samples $((512 * n * 30)) \
      --eval-samples 2000 --batch 512 --log-every 0 --shard "$m" --report "$OUT/$m-$n/rank{rank}.json" \
      > "$OUT/$m-$n/log.txt" 2>&1
  done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
print("| mode | ranks | parameters MB | gradients held MB | shard copy MB | Adam state MB | step's peak above live MB | sent MB/step (ring) | x all-reduce | step ms | optimizer ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for n in (1, 2, 3):
    for m in ("none", "zero1", "zero2"):
        r = json.load(open(f"{out}/{m}-{n}/rank0.json"))
        s, p = r["sharding"], r["phases"]
        mem, t = s["memory"], s["traffic"]
        print(f"| {m} | {n} | {mem['parameter_bytes']/1e6:.1f} | {mem['gradient_bytes']/1e6:.1f} | "
              f"{mem['shard_copy_bytes']/1e6:.1f} | {mem['optimizer_state_bytes']/1e6:.1f} | "
              f"{mem['step_peak_extra_bytes']/1e6:.1f} | {t['ring_bytes_per_step']/1e6:.2f} | "
              f"{t['ratio_to_allreduce']:.3f} | {p['step_median']*1e3:.1f} | {p['step_medians']['optimizer']*1e3:.1f} |")
PY
