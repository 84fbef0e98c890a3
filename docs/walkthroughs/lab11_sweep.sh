#!/bin/bash
# Lab 11's measurements (docs/walkthroughs/lab11_hangs.md) on 2 ranks of ctr-small: (A) each fault
# with the tools on (fingerprints before every collective, a ring of 64) and off, how the job ends
# and how long it takes; (B) the fingerprint check's cost at K = 0, 1, 4, 16 (64 steps, 3 runs
# each, interleaved); (C) a rank's loader slowed by 0-20 ms a batch: what 11.4 names, and the
# cost it predicts against the samples/s lost. Run from the repository root after ./kit main
# (BIN=build/labs/bin for your own code).
set -uo pipefail
BIN=${BIN:-build/solutions/bin}
OUT=${OUT:-runs/lab11_sweep}
run() {  # run NAME ARGS...: the job's exit status, wall seconds and output in $OUT/NAME
  local name=$1
  shift
  rm -rf "${OUT:?}/$name" && mkdir -p "$OUT/$name"
  local t0=$(date +%s.%N)
  "$BIN/ddplab" launch -n 2 --backend c10d -- "$BIN/lab11_hangs" --data data/ctr-small --eval-samples 2000 --batch 256 \
    --log-every 0 --comm-timeout 5 --report "$OUT/$name/rank{rank}.json" "$@" > "$OUT/$name/log.txt" 2>&1
  echo "$? $(echo "$(date +%s.%N) - $t0" | bc)" > "$OUT/$name/status"
}
for f in extra-collective bucket-order uneven freeze die; do
  run "A-$f-on" --train-samples 8192 --fault "$f"
  run "A-$f-off" --train-samples 8192 --fault "$f" --fingerprint-every 0 --flight 0
done
run A-uneven-join --train-samples 8192 --fault uneven --join --parity
for rep in 1 2 3; do
  for k in 0 1 4 16; do run "B-$k-$rep" --train-samples 32768 --fingerprint-every "$k" --straggler-every 0; done
  for ms in 0 5 10 20; do run "C-$ms-$rep" --train-samples 32768 --slow-rank 1 --slow-ms "$ms" --fingerprint-every 0; done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, os, re, statistics, sys
out = sys.argv[1]
def status(n):
    rc, secs = open(f"{out}/{n}/status").read().split()
    return int(rc), float(secs)
def first_line(n):
    for line in open(f"{out}/{n}/log.txt"):
        if re.search(r"error:|ddplab launch:|terminate|what\(\)", line):
            return line.strip()[:160]
    return ""
def rep(n, rank=0):
    p = f"{out}/{n}/rank{rank}.json"
    return json.load(open(p)) if os.path.exists(p) else None
print("| fault | tools | exit | seconds | how it ended (first line) |\n|---|---|---|---|---|")
for f in ["extra-collective", "bucket-order", "uneven", "freeze", "die"]:
    for t in ["on", "off"]:
        n = f"A-{f}-{t}"
        rc, s = status(n)
        print(f"| {f} | {t} | {rc} | {s:.1f} | `{first_line(n)}` |")
rc, s = status("A-uneven-join")
r = rep("A-uneven-join")
print(f"| uneven, --join | on | {rc} | {s:.1f} | join_weighted: {r['verdicts']['join_weighted']['said']} |")
print("\n| K | checks | bytes a check | step ms (median of 3 runs' medians) | check ms a step | share |\n|---|---|---|---|---|---|")
for k in [0, 1, 4, 16]:
    reps = [rep(f"B-{k}-{i}") for i in (1, 2, 3)]
    fp = [r["hangs"]["fingerprint"] for r in reps]
    step = statistics.median(f["median_step_ms"] for f in fp)
    chk = statistics.median(f["median_check_ms_per_step"] for f in fp)
    per = fp[0]["bytes"] // fp[0]["checks"] if fp[0]["checks"] else 0
    print(f"| {k} | {fp[0]['checks']} | {per} | {step:.2f} | {chk:.3f} | {100*chk/step:.1f} % |")
print("\n| slow ms | windows naming rank 1's data_wait | predicted cost samples/s (median) | job samples/s (median of 3) | lost vs 0 ms |\n|---|---|---|---|---|")
base = None
for ms in [0, 5, 10, 20]:
    reps = [rep(f"C-{ms}-{i}") for i in (1, 2, 3)]
    named = reps[0]["hangs"]["stragglers"]
    right = sum(1 for s in named[1:] if s["rank"] == 1 and s["phase"] == "data_wait")
    cost = statistics.median(s["cost_samples_s"] for r in reps for s in r["hangs"]["stragglers"][1:])
    sps = statistics.median(r["phases"]["steps"] * 512 / r["phases"]["wall"] for r in reps)
    base = base or sps
    print(f"| {ms} | {right} of {len(named) - 1} | {cost:.0f} | {sps:.0f} | {base - sps:.0f} |")
PY
