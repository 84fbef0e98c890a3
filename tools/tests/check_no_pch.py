#!/usr/bin/env python3
"""A source that skips the precompiled LibTorch header (ddplab_no_pch, cmake/Flags.cmake) must include
no LibTorch header, directly or through ours: it then parses torch/torch.h itself, 17 of the 25 s that
common/src/flight.cpp took to compile on the 2-core VM (2026-12-07; 5 such files, ~120 s of CPU a build).

Usage: check_no_pch.py <build dir> [ninja]. Reads compile_commands.json for the files compiled without
the PCH and the header dependencies Ninja recorded for them (`ninja -t deps`); run after a build.
"""
import json
import os
import re
import subprocess
import sys

# LibTorch's own headers, wherever its include folder is (/usr/include, or the pip wheel's
# torch/include, which also holds fmt: the fmt of torch's c10d headers, not LibTorch).
LIBTORCH_HEADER = re.compile(r"/include/(torch|ATen|c10)/")


def main():
    build = os.path.abspath(sys.argv[1])
    ninja = sys.argv[2] if len(sys.argv) > 2 else "ninja"
    entries = json.load(open(os.path.join(build, "compile_commands.json")))
    outputs = {}
    for e in entries:
        # Only this build's own objects: the grader's submission slot compiles in folders of its own.
        if os.path.abspath(e["directory"]) != build or "-include-pch" in e["command"] or "cmake_pch" in e["file"]:
            continue
        args = e["command"].split()
        obj = args[args.index("-o") + 1] if "-o" in args else None
        # A sanitized build (<target>_tests_sanitized*, built on demand by `grade --sanitize`) has flags
        # of its own that the PCH was not built with: it skips the PCH by design.
        if obj and "_sanitized" not in obj:
            outputs[obj] = e["file"]
    if not outputs:
        print("check_no_pch: no source is compiled without the PCH here (DDPLAB_PCH=OFF?)", file=sys.stderr)
        sys.exit(1)
    p = subprocess.run([ninja, "-C", build, "-t", "deps", *outputs], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"check_no_pch: ninja -t deps failed: {p.stderr}", file=sys.stderr)
        sys.exit(1)
    bad, current, unknown = {}, None, []
    for line in p.stdout.splitlines():
        if line and not line.startswith(" "):
            current = line.split(":")[0]
            if "(VALID)" not in line and "(STALE)" not in line:
                unknown.append(current)
        elif current and LIBTORCH_HEADER.search(line):
            bad.setdefault(current, line.strip())
    for obj in unknown:
        print(f"check_no_pch: no recorded dependencies for {obj} (build first)", file=sys.stderr)
    for obj, header in sorted(bad.items()):
        src = outputs[obj]
        if "/Unity/" in src:  # a batch of the unity build (ddplab_unity): name its sources
            batch = re.findall(r'#include "([^"]+)"', open(src).read())
            src = f"{src} (the batch of {', '.join(batch)})"
        print(f"{src}: skips the PCH (ddplab_no_pch) but includes LibTorch ({header}); "
              "take the source that does out of the ddplab_no_pch list, or its LibTorch include out of it")
    print(f"check_no_pch: {len(outputs)} file(s) compiled without the PCH, {len(bad)} of them include LibTorch")
    sys.exit(1 if bad or unknown else 0)


if __name__ == "__main__":
    main()
