#!/usr/bin/env bash
# The kit's GPU check: one command for a Linux machine with an NVIDIA GPU, python3 with a CUDA
# torch 2.x, nvcc, cmake and ninja, but no apt and no internet. It builds the kit against that
# torch (the third-party headers and GoogleTest's sources from tools/gpu-bundle.sh, made on a
# Debian machine beforehand) and runs what the CPU machines cannot: doctor on CUDA (GPU, driver,
# NVML, NCCL), the CUDA unit tests, lab 01's reference on --device cuda, lab 05 with float16 + loss
# scaling and with bfloat16, a 1-rank NCCL group under `bench allreduce`, the grader on labs 01
# and 05 with NVML utilization, the one-GPU-per-rank errors, and with 2+ GPUs labs 02 and 03 on 2
# ranks over NCCL. Every step runs under a time limit; a failed step is recorded and the next one
# runs. Everything printed goes to $OUT/gpu-check.log, the verdicts to $OUT/summary.txt; $OUT
# also gets doctor.json, bench_allreduce.json, the grader's results.json (grade-results.json) and
# the lab reports (lab01.json, lab05_fp16.json, lab05_bf16.json): eight files, nothing deeper.
# The data set, the runs and the grader's other outputs stay in the work folder.
#
#   tools/gpu-check.sh [--dry-run] [--only S,S] [--skip S,S] [--out DIR] [--work DIR] [--bundle DIR]
#                      [--python PY] [--build DIR] [--jobs N]
#     --out      the log, the summary and the files above (default: $OUT, else runs/gpu-check)
#     --work     data, runs and the grader's outputs (default: runs/gpu-check-work)
#     --bundle   tools/gpu-bundle.sh's folder (default: .gpu-bundle)
#     --python   the python3 whose torch the kit is built against (default: python3)
#     --build    the build folder (default: build/gpu)
#     --only, --skip   run only / all but these steps (names as --dry-run lists them), e.g. the
#                build in one call and the checks in the next on a machine that limits each call
#     --dry-run  list the steps and their commands; run nothing (needs no GPU; tested in ctest)
# Exit status: 0 when every step that ran passed, 1 otherwise, 2 for bad arguments.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUTDIR=${OUT:-runs/gpu-check}
WORK=$ROOT/runs/gpu-check-work
ONLY=""
SKIP=""
BUNDLE=$ROOT/.gpu-bundle
PY=python3
BUILD=$ROOT/build/gpu
JOBS=$(nproc 2>/dev/null || echo 4)
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out) OUTDIR=$2; shift ;;
    --work) WORK=$2; shift ;;
    --only) ONLY=",$2,"; shift ;;
    --skip) SKIP=",$2,"; shift ;;
    --bundle) BUNDLE=$2; shift ;;
    --python) PY=$2; shift ;;
    --build) BUILD=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    -h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
case "$BUNDLE" in /*) ;; *) BUNDLE=$ROOT/$BUNDLE ;; esac
mkdir -p "$OUTDIR" "$WORK"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(cd "$WORK" && pwd)
LOG=$OUTDIR/gpu-check.log
SUMMARY=$OUTDIR/summary.txt
BIN=$BUILD/bin
DATA=$WORK/data
REP=$WORK/reports
[ "$DRY" = 1 ] || touch "$LOG" "$SUMMARY"  # appended to: --only/--skip calls add up
START=$SECONDS
FAILED=0

# GPUs this machine has (0 in a dry run or without nvidia-smi).
gpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true; }
NGPU=0
[ "$DRY" = 1 ] || NGPU=$(gpus)

# step NAME LIMIT_S DESCRIPTION -- COMMAND...: runs COMMAND (a shell string) under `timeout`,
# everything it prints appended to the log and shown, and one line in the summary.
step() {
  local name=$1 limit=$2 what=$3 cmd=$4
  if { [ -n "$ONLY" ] && [[ "$ONLY" != *",$name,"* ]]; } || [[ "$SKIP" == *",$name,"* ]]; then return 0; fi
  if [ "$DRY" = 1 ]; then
    printf 'step %-14s (%4ss) %s\n    %s\n' "$name" "$limit" "$what" "$cmd"
    return 0
  fi
  local t0=$SECONDS rc
  printf '\n===== %s: %s (limit %s s)\n$ %s\n' "$name" "$what" "$limit" "$cmd" | tee -a "$LOG"
  timeout --kill-after=10 "$limit" bash -o pipefail -c "$cmd" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  local verdict=OK
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    verdict="FAILED (timed out after $limit s)"
  elif [ "$rc" != 0 ]; then
    verdict="FAILED (exit $rc)"
  fi
  [ "$verdict" = OK ] || FAILED=1
  printf '%-14s %-28s %4d s  %s\n' "$name" "$verdict" $((SECONDS - t0)) "$what" | tee -a "$SUMMARY" >>"$LOG"
}

# expect_error NAME REGEX DESCRIPTION COMMAND: the command must fail, saying REGEX.
expect_error() {
  local name=$1 regex=$2 what=$3 cmd=$4
  step "$name" 120 "$what" "out=\$($cmd 2>&1); rc=\$?; printf '%s\n' \"\$out\"; [ \$rc -ne 0 ] && printf '%s' \"\$out\" | grep -Eq '$regex'"
}

TORCH_PREFIX='$('"$PY"' -c "import torch; print(torch.utils.cmake_prefix_path)")'
step env 60 "the machine: GPU, driver, torch, CUDA, tools" \
  "nvidia-smi; $PY -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"gpus\", torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else \"-\")'; nvcc --version | tail -2; cmake --version | head -1; ninja --version; c++ --version | head -1; nproc; ls $BUNDLE"
step configure 240 "CMake against this torch (CUDA, NCCL, Gloo required), deps from $BUNDLE" \
  "cmake -S $ROOT -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$TORCH_PREFIX -DDDPLAB_REQUIRE_CUDA=ON -DDDPLAB_DEPS_DIR=$BUNDLE -DDDPLAB_TORCH=gpu-check -DDDPLAB_WERROR=OFF -DDDPLAB_LAB_SOURCE=solutions > $WORK/configure.log 2>&1; rc=\$?; grep -E 'ddplab:|Error|error|Warning' $WORK/configure.log; exit \$rc"
step build 540 "the programs the checks run, labs 01 and 05's tests and common_tests ($JOBS jobs; warnings printed, not errors: this compiler is not CI's)" \
  "cmake --build $BUILD -j $JOBS --target ddplab ddplab_front ddp_train ddplab_run_as common_tests lab01_baseline lab01_baseline_tests lab02_process_group lab03_sampler lab05_mixed_precision lab05_mixed_precision_tests > $WORK/build.log 2>&1; rc=\$?; grep -Ev '^\\[[0-9]+/[0-9]+\\] ' $WORK/build.log; exit \$rc"
step doctor 60 "ddplab doctor on CUDA: GPU, driver, NVML, NCCL compiled and loaded" \
  "$BIN/ddplab doctor --strict && $BIN/ddplab doctor --json > $OUTDIR/doctor.json"
step unit 300 "the unit tests that touch CUDA, NVML, the device checks and the stager" \
  "$BUILD/common/common_tests --gtest_color=no --gtest_filter='CudaInfo.*:ParseDevice.*:Nvml.*:OneDevicePerRank.*:NcclStaging.*:Memory*:Staging*:DeviceStager*'"
step data 120 "a small ctr-small (100k train, 20k test)" \
  "$BIN/ddplab data gen --out $DATA --train 100000 --test 20000 --seed 1"
step lab01 180 "lab 01's reference on --device cuda (one epoch of 100k samples)" \
  "$BIN/lab01_baseline --data $DATA --device cuda --eval-samples 20000 --log-every 50 --report $REP/lab01.json"
step lab05_fp16 180 "lab 05: float16 autocast + dynamic loss scaling on CUDA, overflows injected" \
  "$BIN/lab05_mixed_precision --data $DATA --device cuda --autocast --autocast-dtype float16 --loss-scaling --inject-overflow 20 --growth-interval 50 --eval-samples 20000 --report $REP/lab05_fp16.json"
step lab05_bf16 180 "lab 05: bfloat16 autocast on CUDA" \
  "$BIN/lab05_mixed_precision --data $DATA --device cuda --autocast --autocast-dtype bfloat16 --eval-samples 20000 --report $REP/lab05_bf16.json"
step nccl_1rank 180 "a 1-rank NCCL process group: bench allreduce over NCCL (results checked)" \
  "$BIN/ddplab launch -n 1 -- $BIN/ddplab bench allreduce --device cuda --backend nccl --max-bytes 67108864 --iters 20 --json $OUTDIR/bench_allreduce.json"
step grade 400 "the grader on labs 01 and 05 with every run on CUDA (NVML utilization)" \
  "DDPLAB_DEVICE=cuda $BIN/ddplab grade lab01 lab05 --tree solutions --no-build --sandbox none --data $DATA --out $WORK/grade"
expect_error err_rank_gpu "local rank $NGPU would use cuda:$NGPU, but this machine has $NGPU visible GPU" \
  "one rank more than the GPUs, on --device cuda, stops at once, naming the rank" \
  "$BIN/ddplab launch -n $((NGPU + 1)) -- $BIN/lab01_baseline --data $DATA --device cuda --max-steps 2 --report $REP/err{rank}.json"
expect_error err_same_gpu "NCCL needs one GPU per rank" \
  "two ranks forced onto cuda:0 with NCCL stop before NCCL, naming both" \
  "$BIN/ddplab launch -n 2 -- $BIN/ddplab bench allreduce --device cuda:0 --backend nccl --max-bytes 1024 --iters 2"
if [ "$DRY" = 1 ] || [ "$NGPU" -ge 2 ]; then
  step lab02_nccl 240 "(2+ GPUs) lab 02 on 2 ranks over NCCL" \
    "$BIN/ddplab launch -n 2 -- $BIN/lab02_process_group --data $DATA --device cuda --eval-samples 20000 --report $REP/lab02_rank{rank}.json"
  step lab03_nccl 240 "(2+ GPUs) lab 03 on 2 ranks over NCCL" \
    "$BIN/ddplab launch -n 2 -- $BIN/lab03_sampler --data $DATA --device cuda --eval-samples 20000 --report $REP/lab03_rank{rank}.json"
fi
if [ "$DRY" = 1 ]; then
  echo "gpu-check --dry-run: nothing ran; the log would be $LOG, the verdicts $SUMMARY"
  exit 0
fi
# The figures of the reports, and the files that come back beside the log.
step files 30 "copy the grader's results and the lab reports beside the log" \
  "cp -v $WORK/grade/results.json $OUTDIR/grade-results.json; for r in lab01 lab05_fp16 lab05_bf16; do cp -v $REP/\$r.json $OUTDIR/; done"
step figures 60 "samples/s, utilization and AUC from the lab reports" \
  "$PY - $REP <<'PY'
import json, os, sys
d = sys.argv[1]
for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
    if not f.endswith('.json'): continue
    r = json.load(open(os.path.join(d, f)))
    if 'schema' not in r: continue
    u, e, ph, sm, mem = (r.get(k, {}) for k in ('utilization', 'eval', 'phases', 'samples', 'memory'))
    sps = sm.get('processed', 0) / ph['wall'] if ph.get('wall') else None
    print(f, r.get('status'), 'device', r.get('device'), '| samples/s', round(sps) if sps else None,
          '| step median ms', round(1000 * ph.get('step_median', 0), 3), '| busy', u.get('source'),
          u.get('gpu_median', u.get('busy')), '| auc', e.get('auc'), '| memory', json.dumps(mem),
          '| amp', json.dumps({k: r.get('amp', {}).get(k) for k in ('dtype', 'skipped_steps', 'skips_match_injected')}))
PY"
printf '\ngpu-check: %s in %d s on %s GPU(s); verdicts in %s\n' "$([ $FAILED = 0 ] && echo 'every step passed' || echo 'some steps FAILED')" \
  $((SECONDS - START)) "$NGPU" "$SUMMARY" | tee -a "$LOG"
cat "$SUMMARY"
exit $FAILED
