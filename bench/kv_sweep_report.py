#!/usr/bin/env python3
"""Table and plot of a bench/kv_sweep.sh run.

    bench/kv_sweep_report.py OUT [--svg FILE] [--title TEXT]

Reads OUT/full.json and OUT/<policy>-protect<0|1>.json (each a `frugal eval --out` file: a list of
reports, one per swept budget) and prints a Markdown table: pooled accuracy over every task with a
95% Wilson interval, the retrieval tasks (passkey + kv_recall) pooled, each task, and the mean KL
against the reference cache. --svg writes accuracy against budget, one line per policy, dashed
without prompt protection. Standard library only.
"""
import argparse
import glob
import json
import math
import os
import re

TASKS = ["passkey", "kv_recall", "var_track", "arithmetic", "word_count"]
COLORS = {"full": "#000000", "random": "#d62728", "window": "#7f7f7f", "snapkv": "#1f77b4",
          "h2o": "#2ca02c", "tova": "#9467bd", "rkv": "#ff7f0e"}


def wilson(k, n, z=1.96):
    if n == 0:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def pooled(cells, tasks=None):
    k = sum(c["correct"] for c in cells if tasks is None or c["task"] in tasks)
    n = sum(c["n"] for c in cells if tasks is None or c["task"] in tasks)
    return k, n


def kl_mean(cells):
    vals = [(c["kl_mean"], c.get("kl_n", 0)) for c in cells if c.get("kl_n", 0) > 0]
    w = sum(n for _, n in vals)
    return sum(v * n for v, n in vals) / w if w else float("nan")


def budget_of(label):
    m = re.search(r"kv-budget=([0-9.]+)", label)
    return float(m.group(1)) if m else 1.0


def load(out):
    rows = []
    full = json.load(open(os.path.join(out, "full.json")))
    for rep in full:
        rows.append(("full", None, 1.0, rep))
    for path in sorted(glob.glob(os.path.join(out, "*-protect[01].json"))):
        m = re.match(r"(.+)-protect([01])\.json", os.path.basename(path))
        for rep in json.load(open(path)):
            rows.append((m.group(1), m.group(2) == "1", budget_of(rep["label"]), rep))
    order = {p: i for i, p in enumerate(COLORS)}
    rows.sort(key=lambda r: (order.get(r[0], len(order)), r[1] is False, r[2]))
    return rows


def pct(k, n):
    return 100.0 * k / n if n else float("nan")


def table(rows):
    head = ("| policy | prompt | budget | all tasks % [95% CI] | passkey+kv_recall % [95% CI] | "
            + " | ".join(TASKS) + " | mean KL | rounds/example | ms/round |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for policy, prot, budget, rep in rows:
        cells = rep["cells"]
        k, n = pooled(cells)
        lo, hi = wilson(k, n)
        rk, rn = pooled(cells, {"passkey", "kv_recall"})
        rlo, rhi = wilson(rk, rn)
        per = {c["task"]: pct(c["correct"], c["n"]) for c in cells}
        ex = rep.get("examples", [])
        rounds = [e.get("kv_rounds", 0) for e in ex]
        round_ms = [e.get("kv_round_ms", 0) for e in ex]
        r_total = sum(rounds)
        lines.append("| %s | %s | %s | %.1f [%.0f, %.0f] | %.1f [%.0f, %.0f] | %s | %.2g | %s | %s |" % (
            policy, "-" if prot is None else ("protected" if prot else "plain"),
            "100%" if policy == "full" else "%g%%" % (100 * budget),
            pct(k, n), 100 * lo, 100 * hi, pct(rk, rn), 100 * rlo, 100 * rhi,
            " | ".join("%.0f" % per.get(t, float("nan")) for t in TASKS), kl_mean(cells),
            "%.1f" % (r_total / len(ex)) if ex and r_total else "-",
            "%.2f" % (sum(round_ms) / r_total) if r_total else "-"))
    return "\n".join(lines)


def svg(rows, title):
    w, h, x0, x1, y0, y1 = 660, 400, 60, 500, 350, 40
    budgets = sorted({b for p, _, b, _ in rows if p != "full"})
    xs = {b: x0 + (x1 - x0) * i / max(1, len(budgets) - 1) for i, b in enumerate(budgets)}

    def y(v):
        return y0 - (y0 - y1) * v / 100.0

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (w, h), '<rect width="%d" height="%d" fill="white"/>' % (w, h),
           '<text x="%d" y="16">%s</text>' % (x0, title)]
    for v in range(0, 101, 25):
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="22" y="%.1f">%d%%</text>'
                   % (x0, x1, y(v), y(v), y(v) + 4, v))
    for b, x in xs.items():
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%g%%</text>' % (x, y0 + 16, 100 * b))
    out.append('<text x="%d" y="%d" text-anchor="middle">KV budget</text>' % ((x0 + x1) // 2, y0 + 34))
    full = [r for r in rows if r[0] == "full"]
    if full:
        k, n = pooled(full[0][3]["cells"])
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="2,3"/>'
                   % (x0, x1, y(pct(k, n)), y(pct(k, n))))
    legend_y = y1
    series = sorted({(p, prot) for p, prot, _, _ in rows if p != "full"}, key=lambda s: (s[0], not s[1]))
    for p, prot in series:
        pts = sorted((b, rep) for q, pr, b, rep in rows if q == p and pr == prot)
        coords = []
        for b, rep in pts:
            k, n = pooled(rep["cells"])
            coords.append((xs[b], y(pct(k, n))))
        color = COLORS.get(p, "#333")
        dash = '' if prot else ' stroke-dasharray="5,4"'
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>' % (
            color, dash, " ".join("%.1f,%.1f" % c for c in coords)))
        for cx, cy in coords:
            out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (cx, cy, color))
        out.append('<line x1="515" x2="540" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1.8"%s/>'
                   '<text x="545" y="%.1f">%s %s</text>' % (legend_y, legend_y, color, dash, legend_y + 4, p,
                                                            "+prompt" if prot else "plain"))
        legend_y += 16
    if full:
        out.append('<line x1="515" x2="540" y1="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="2,3"/>'
                   '<text x="545" y="%.1f">full cache</text>' % (legend_y, legend_y, legend_y + 4))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--svg")
    ap.add_argument("--title", default="Accuracy (all task families pooled) vs KV budget")
    a = ap.parse_args()
    rows = load(a.out)
    print(table(rows))
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(rows, a.title))


if __name__ == "__main__":
    main()
