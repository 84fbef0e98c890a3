#!/usr/bin/env python3
"""The doc-test: every ```sh block of the README, the handouts and docs/ runs, in a scratch folder
laid out like a student's or instructor's clone, against the kit the CI built (both trees, the
tiny data set). A block that is not meant to be run here says so on the line before its fence,
with the reason: <!-- doctest: skip (needs a CUDA GPU) -->. Nothing is skipped silently: the run
lists every skipped block with its reason.

How the clone is stood in for (printed at the start of the run):
  tools/ solutions/ ...               the kit's own folders (links)
  build/solutions                     the CI's build (both trees); its programs through wrappers
                                      that cap sample counts: --train-samples at 8,192,
                                      --eval-samples at 4,096, --train at 8,192, --test at 20,000;
                                      ddplab preflight and forecast: --steps 10 unless given,
                                      forecast --max-bytes 1 MiB unless given
  build/labs/bin                      the skeletons' programs and tests, and a `ddplab` that grades
                                      the skeletons' tree (--tree labs) as a student's would
  data/ctr-small                      a generated set of 8,192 training and 20,000 test samples
  docs/ labs/                         copies (a block may write into them: the plots of lab 06)
  sweep scripts                       smaller, by their own knobs: KS, RECIPES, TRAIN_SAMPLES, EVAL, STEPS, DIMS
  ./kit                               `./kit build ...` is done already (the CI built both trees);
                                      `./kit main` and `./kit test` are the CI itself: not rerun
Each block runs as one bash script; every command in it must end with exit status 0, or 3 (a lab
program, or the skeletons' tests and grade, whose exercises are not attempted, as the docs say);
a benchmark's or pre-flight's FAILED / NOT READY verdict is reported, not counted as an error. A
block that shows a failure on purpose is marked <!-- doctest: expect-fail (what fails) --> and
must fail.

usage: doc_shell_blocks.py KIT BUILD SCRATCH [FILE...]"""
import os
import re
import shutil
import subprocess
import sys
import time

SKIP = re.compile(r"<!--\s*doctest:\s*skip\s*\((.+)\)\s*-->")
EXPECT_FAIL = re.compile(r"<!--\s*doctest:\s*expect-fail\s*\((.+)\)\s*-->")
FENCE_OPEN = re.compile(r"^(\s*)```(sh|bash|shell)\s*$")


def blocks(path):
    """(line number, text, skip reason or None) of every shell block of a Markdown file."""
    out, lines = [], open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start, body = len(m.group(1)), i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        prev = lines[start - 2] if start >= 2 else ""
        sm, fm = SKIP.search(prev), EXPECT_FAIL.search(prev)
        out.append((start, "\n".join(body), sm.group(1) if sm else None, fm.group(1) if fm else None))
        i += 1
    return out


# Folders copied into the stand-in clone rather than linked: a block may write into them.
COPIED = ("docs", "labs")
# The walkthroughs' sweep scripts run every configuration, each on fewer samples or steps, through
# their own documented knobs (the full sweeps take 5-20 minutes on 2 cores: docs/walkthroughs/*.sh).
SWEEP_KNOBS = {"KS": "1 16", "RECIPES": "none linear_warmup", "TRAIN_SAMPLES": "4096", "EVAL": "2000", "STEPS": "30",
               "DIMS": "16 64"}

CAP_ARGS = r"""
# The stand-in data set holds 8,192 training and 20,000 test samples (lab 09's template evaluates
# 20,000): a lab trains on at most all of them and evaluates at most 4,096 when told a number (the
# commands' behaviour, not their figures, is what is checked; most of a block's time is then the
# programs' start-up), and data sets are capped at the stand-in's size. (20,000 training samples
# until 2026-12-06: a program given no --train-samples trained on all of them, and the doc-test
# took 11-13 minutes of the CI's 35.)
args=(); prev=""
for a in "$@"; do
  case "$prev" in
    --train-samples) [ "$a" -gt 8192 ] 2>/dev/null && a=8192;;
    --eval-samples) [ "$a" -gt 4096 ] 2>/dev/null && a=4096;;
    --train) [ "$a" -gt 8192 ] 2>/dev/null && a=8192;;
    --test) [ "$a" -gt 20000 ] 2>/dev/null && a=20000;;
  esac
  args+=("$a"); prev=$a
done
"""
SKELETON_TESTS = r"""
json=$(mktemp --suffix .json)
REAL "${args[@]}" --gtest_output=json:"$json"
rc=$?
# Failing only at the NotImplemented stubs is what the docs say the skeletons' tests do: exit 3.
if [ "$rc" -eq 1 ] && python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
fails = [t for s in j["testsuites"] for t in s["testsuite"] if t.get("failures")]
msg = lambda t: "".join(f["failure"] for f in t["failures"])
sys.exit(0 if fails and all("is not implemented yet" in msg(t) for t in fails) else 1)' "$json"; then rc=3; fi
rm -f "$json"
exit "$rc"
"""
DDPLAB = r"""
extra=()
if [ "${args[0]:-}" = grade ] && [ STUDENT = 1 ]; then  # a student's ddplab grades their tree
  [[ " $* " == *" --tree "* || " $* " == *" --submission "* || " $* " == *" --batch "* ]] || extra=(--tree labs)
fi
# A pre-flight's or forecast's trials: 10 steps each, all-reduces up to 1 MiB (its verdict on this
# machine is noted, not checked; 40 steps and 64 MiB made lab 09's how-to block 168 s of the doc-test).
case "${args[0]:-}" in
  preflight|forecast)
    short=("${args[0]}")
    [[ " $* " == *" --steps "* ]] || short+=(--steps 10)
    [ "${args[0]}" = forecast ] && [[ " $* " != *" --max-bytes "* ]] && short+=(--max-bytes 1048576)
    args=("${short[@]}" "${args[@]:1}");;
esac
out=$(mktemp)
REAL "${args[@]}" "${extra[@]}" | tee "$out"
rc=${PIPESTATUS[0]}
case "${args[0]:-}" in
  # Grading work with nothing attempted: no points (exit 1) is the documented outcome, as 3.
  grade) if [ "$rc" -eq 1 ] && grep -q "not attempted: exercise" "$out" && ! grep -qE "^ +FAIL " "$out"; then rc=3; fi;;
  # A benchmark's or a pre-flight's exit 1 is its verdict against a target, a measurement of this
  # (shared, loaded) machine, not an error in the docs.
  bench|preflight|forecast)
    if [ "$rc" -eq 1 ] && grep -qE "FAILED|NOT READY" "$out"; then echo "doctest: verdict noted, not an error"; rc=0; fi;;
esac
rm -f "$out"
exit "$rc"
"""


def wrap(path, real, body=None, student=False):
    text = "#!/usr/bin/env bash\n" + CAP_ARGS + (body or 'exec REAL "${args[@]}"\n')
    with open(path, "w") as f:
        f.write(text.replace("REAL", real).replace("STUDENT", "1" if student else "0"))
    os.chmod(path, 0o755)


def wrap_bin(real_dir, dir, student):
    os.makedirs(dir)
    for name in os.listdir(real_dir):
        real = os.path.join(real_dir, name)
        if not os.access(real, os.X_OK) or os.path.isdir(real):
            continue
        if name.endswith("_tests_labs"):  # the skeletons' public tests, as a student's build names them
            wrap(os.path.join(dir, name[: -len("_labs")]), real, SKELETON_TESTS)
        elif name == "ddplab":
            wrap(os.path.join(dir, name), real, DDPLAB, student)
        else:
            wrap(os.path.join(dir, name), real)


def mirror(real, dir, wrapped):
    """dir: links to real's entries, except `wrapped` sub-folders, made by the caller."""
    os.makedirs(dir, exist_ok=True)
    for name in os.listdir(real):
        if name not in wrapped:
            os.symlink(os.path.join(real, name), os.path.join(dir, name))


def stand_in(kit, build, scratch):
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    for name in os.listdir(kit):
        if name in ("build", "data", "runs", "kit") or name.startswith("."):
            continue
        if name in COPIED:  # blocks write here (plots into docs/walkthroughs/img): not the kit's own files
            shutil.copytree(os.path.join(kit, name), os.path.join(scratch, name), symlinks=True)
        else:
            os.symlink(os.path.join(kit, name), os.path.join(scratch, name))
    sol = os.path.join(scratch, "build", "solutions")
    mirror(build, sol, ("bin", "labs"))
    wrap_bin(os.path.join(build, "bin"), os.path.join(sol, "bin"), False)
    mirror(os.path.join(build, "labs"), os.path.join(sol, "labs"), ("bin",))
    wrap_bin(os.path.join(build, "labs", "bin"), os.path.join(sol, "labs", "bin"), False)
    # A student's build/labs: the skeletons' programs and tests, with the kit's tools.
    labs_bin = os.path.join(scratch, "build", "labs", "bin")
    wrap_bin(os.path.join(build, "labs", "bin"), labs_bin, True)
    for tool in ("ddplab", "ddp_train"):
        if tool == "ddplab":
            wrap(os.path.join(labs_bin, tool), os.path.join(build, "bin", tool), DDPLAB, True)
        else:
            wrap(os.path.join(labs_bin, tool), os.path.join(build, "bin", tool))
    os.makedirs(os.path.join(scratch, "data"))
    subprocess.run([os.path.join(build, "bin", "ddplab"), "data", "gen", "--out", os.path.join(scratch, "data", "ctr-small"),
                    "--train", "8192", "--test", "20000", "--seed", "1"], check=True, capture_output=True)
    with open(os.path.join(scratch, "kit"), "w") as f:
        f.write('#!/usr/bin/env bash\ncase "${1:-}" in\n'
                '  build) echo "doctest: ./kit $* — done already (the CI built both trees)";;\n'
                '  *) echo "doctest: ./kit $* is the CI itself: not rerun";;\nesac\n')
    os.chmod(os.path.join(scratch, "kit"), 0o755)


# Every command must end with status 0, or 3 (a lab program whose exercises are not attempted);
# a block marked expect-fail must have some command that fails (a documented failure).
PRELUDE = {
    False: "set -o pipefail\ntrap 'rc=$?; if [ $rc -ne 3 ]; then echo \"doctest: FAILED (exit $rc): $BASH_COMMAND\" >&2; "
           "exit 1; fi' ERR\n",
    True: "set -o pipefail\nfailed=0\ntrap 'rc=$?; [ $rc -ne 3 ] && failed=1' ERR\n",
}
def script(text, expect_fail):
    body = text
    end = "\n[ $failed = 1 ] || { echo 'doctest: FAILED: the block documents a failure, and none happened' >&2; exit 1; }\n"
    # The trap stops at a real failure; a last command that ends with 3 is not one.
    return PRELUDE[expect_fail] + body + (end if expect_fail else "\nexit 0\n")


def main():
    kit, build, scratch = (os.path.abspath(a) for a in sys.argv[1:4])
    files = sys.argv[4:] or None
    if files is None:
        files = ["README.md"]
        for root in ("docs", "labs"):
            for d, _, names in sorted(os.walk(os.path.join(kit, root))):
                for n in sorted(names):
                    p = os.path.relpath(os.path.join(d, n), kit)
                    if n.endswith(".md") and (root == "docs" or n == "README.md"):
                        files.append(p)
    stand_in(kit, build, scratch)
    print(__doc__.split("\n\n")[1])
    print("sweep knobs: " + " ".join(f"{k}='{v}'" for k, v in SWEEP_KNOBS.items()))
    ran = failed = 0
    skipped = []
    for f in files:
        for line, text, reason, fails in blocks(os.path.join(kit, f)):
            where = f"{f}:{line}"
            if reason:
                skipped.append((where, reason))
                continue
            body = script(text, fails is not None)
            start = time.time()
            # Open MPI refuses root unless told: the CI runs as root, a student does not.
            env = dict(os.environ, DDPLAB_DATA=os.path.join(scratch, "data", "ctr-small"), OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **SWEEP_KNOBS)
            p = subprocess.run(["bash", "-c", body], cwd=scratch, capture_output=True, text=True, timeout=900,
                               stdin=subprocess.DEVNULL, env=env)
            ran += 1
            took = time.time() - start
            if p.returncode != 0:
                failed += 1
                print(f"FAILED {where} ({took:.0f} s)\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
            else:
                print(f"ok     {where} ({took:.0f} s)")
    for where, reason in skipped:
        print(f"skip   {where}: {reason}")
    print(f"doctest: {ran} block(s) run, {failed} failed, {len(skipped)} skipped with a reason")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
