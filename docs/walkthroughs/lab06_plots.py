#!/usr/bin/env python3
"""The plots of docs/walkthroughs/lab06_large_batch.md, from the reports lab06_sweep.sh wrote.

    python3 docs/walkthroughs/lab06_plots.py runs/lab06_sweep docs/walkthroughs/img

Writes lab06_auc.svg (test AUC after one epoch against the global batch, one line per recipe) and
lab06_loss_16k.svg (rank 0's training loss over the samples seen at a global batch of 16,384,
a moving average over 2 % of the epoch). Plain SVG, no plotting library needed.
"""
import glob
import json
import math
import os
import sys

RECIPES = ["none", "linear", "linear_warmup", "sqrt", "linear_emb_none"]
COLORS = ["#4e79a7", "#e15759", "#f28e2b", "#59a14f", "#b07aa1"]
W, H, L, R, T, B = 640, 360, 64, 170, 24, 48


def load(folder):
    runs = {}
    for f in glob.glob(os.path.join(folder, "*.rank0.json")):
        name = os.path.basename(f).split(".")[0]
        k, recipe = name.split("_", 1)
        runs[(int(k[1:]), recipe)] = json.load(open(f))
    return runs


def svg(title, xlabel, ylabel, series, xs_log=False, ylim=None):
    pts = [p for _, s in series for p in s if p[1] is not None and math.isfinite(p[1])]
    fx = (lambda x: math.log2(x)) if xs_log else (lambda x: x)
    x0, x1 = min(fx(p[0]) for p in pts), max(fx(p[0]) for p in pts)
    y0, y1 = ylim if ylim else (min(p[1] for p in pts), max(p[1] for p in pts))
    if y1 == y0:
        y1 = y0 + 1
    sx = lambda x: L + (fx(x) - x0) / (x1 - x0 or 1) * (W - L - R)
    sy = lambda y: T + (1 - (min(max(y, y0), y1) - y0) / (y1 - y0)) * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="16" font-weight="bold">{title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">{xlabel}</text>',
           f'<text x="14" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 14 {(T + H - B) / 2})">{ylabel}</text>']
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3f}</text>')
        out.append(f'<line x1="{L}" y1="{sy(y):.1f}" x2="{W - R}" y2="{sy(y):.1f}" stroke="#ddd"/>')
    ticks = sorted({p[0] for p in pts}) if xs_log else [x0 + (x1 - x0) * i / 4 for i in range(5)]
    for x in ticks:
        label = f"{x:,.0f}" if not xs_log else f"{x:,}"
        out.append(f'<text x="{sx(x):.1f}" y="{H - B + 16}" text-anchor="middle">{label}</text>')
    for i, (name, s) in enumerate(series):
        good = [p for p in s if p[1] is not None and math.isfinite(p[1])]
        if not good:
            continue
        d = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(good))
        c = COLORS[i % len(COLORS)]
        out.append(f'<path d="{d}" fill="none" stroke="{c}" stroke-width="2"/>')
        if xs_log:
            out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>' for x, y in good]
        out.append(f'<rect x="{W - R + 12}" y="{T + 18 * i}" width="12" height="12" fill="{c}"/>')
        out.append(f'<text x="{W - R + 30}" y="{T + 18 * i + 11}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    folder, img = sys.argv[1], sys.argv[2]
    os.makedirs(img, exist_ok=True)
    runs = load(folder)
    auc = []
    for r in RECIPES:
        pts = sorted((k * 1024, (rep.get("eval") or {}).get("auc")) for (k, rr), rep in runs.items() if rr == r)
        auc.append((r.replace("_", " "), pts))
    with open(os.path.join(img, "lab06_auc.svg"), "w") as f:
        f.write(svg("Test AUC after one epoch, 2 ranks x 512, Adam", "global batch (samples)", "test AUC", auc,
                    xs_log=True))
    loss = []
    for r in RECIPES:
        rep = runs.get((16, r))
        if not rep:
            continue
        ls = rep["steps"]["loss"]
        win = max(1, len(ls) // 50)
        pts = [((i + 1) * 1024, sum(ls[max(0, i - win + 1):i + 1]) / len(ls[max(0, i - win + 1):i + 1]))
               for i in range(0, len(ls), max(1, len(ls) // 200))]
        loss.append((r.replace("_", " "), pts))
    if loss:
        with open(os.path.join(img, "lab06_loss_16k.svg"), "w") as f:
            f.write(svg("Training loss at a global batch of 16,384 (rank 0, moving average)", "samples seen",
                        "training loss", loss, ylim=(0.44, 0.80)))


if __name__ == "__main__":
    main()
