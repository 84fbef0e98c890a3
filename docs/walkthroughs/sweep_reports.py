"""What the walkthroughs' sweep scripts (docs/walkthroughs/lab*_sweep.sh) read back: the run
reports each run of a sweep wrote as OUT/NAME.rank{k}.json (--report "OUT/NAME.rank{rank}.json")."""
import json
import os


def reports(out, name):
    """Every rank's report of run `name` in the folder `out`, rank 0 first; [] if it wrote none."""
    r, k = [], 0
    while os.path.exists(f"{out}/{name}.rank{k}.json"):
        with open(f"{out}/{name}.rank{k}.json", encoding="utf-8") as f:
            r.append(json.load(f))
        k += 1
    return r
