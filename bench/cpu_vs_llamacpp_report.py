#!/usr/bin/env python3
"""Reads the raw outputs cpu_vs_llamacpp.sh leaves in its work folder and prints a markdown table.

Files per model (TAG = 00, 01, ...):
  TAG.model                 label, type, path (tab-separated)
  TAG.llama.R.json          llama-bench -o json of round R
  TAG.frugal.R.json         frugal bench --json of round R
  TAG.llama.rss, TAG.frugal.rss   GNU time -v output of one generation
Throughput is the mean over every sample of every round (tokens/s) with its sample standard
deviation; ratios are frugal / llama.cpp for speed and frugal / llama.cpp for memory (lower is
better there).
"""
import argparse
import glob
import json
import math
import os
import re
import sys


def load_json(path):
    """The JSON value in a file whose first bytes may be log lines; None when there is none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    for start_char in ("[", "{"):
        start = text.find(start_char)
        while start != -1:
            try:
                return json.JSONDecoder().raw_decode(text[start:])[0]
            except json.JSONDecodeError:
                start = text.find(start_char, start + 1)
    return None


def samples(work, tag, engine, n_prompt, n_gen):
    """All tokens/s samples of the test (n_prompt, n_gen) over every round of one engine."""
    out = []
    for path in sorted(glob.glob(os.path.join(work, f"{tag}.{engine}.*.json"))):
        data = load_json(path)
        if data is None:
            continue
        tests = data if isinstance(data, list) else data.get("tests", [])
        for t in tests:
            if t.get("n_prompt") == n_prompt and t.get("n_gen") == n_gen:
                out.extend(float(x) for x in t.get("samples_ts", []))
    return out


def mean_sd(xs):
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def peak_rss_bytes(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    status = re.search(r"Exit status:\s*(\d+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\):\s*(\d+)", text)
    if rss is None or (status is not None and status.group(1) != "0"):
        return None
    return int(rss.group(1)) * 1024


def fmt_speed(m, sd):
    if m is None:
        return "n/a"
    digits = 1 if m >= 100 else 2
    return f"{m:.{digits}f} ± {sd:.{digits}f}"


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def fmt_size(n):
    if n is None:
        return "n/a"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / (1 << 20):.0f} MiB" if n >= 10 << 20 else f"{n / (1 << 20):.1f} MiB"


def fmt_rss(n):
    return "n/a" if n is None else f"{n / 1e9:.3f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--threads", default="?")
    ap.add_argument("--rounds", default="?")
    ap.add_argument("--reps", default="?")
    ap.add_argument("--load-before", default="?")
    ap.add_argument("--load-after", default="?")
    a = ap.parse_args()

    pp, tg = f"pp{a.pp}", f"tg{a.tg}"
    rows = [
        f"| model | type | size | {pp} llama.cpp | {pp} frugal | {pp} ratio | {tg} llama.cpp | {tg} frugal "
        f"| {tg} ratio | peak RSS llama.cpp (GB) | peak RSS frugal (GB) | RSS ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model_file in sorted(glob.glob(os.path.join(a.work, "*.model"))):
        tag = os.path.basename(model_file)[: -len(".model")]
        with open(model_file, encoding="utf-8") as f:
            label, typ, path = f.read().rstrip("\n").split("\t")
        try:
            size = os.path.getsize(path)
        except OSError:
            size = None
        cells = [label, typ, fmt_size(size)]
        for n_prompt, n_gen in ((a.pp, 0), (0, a.tg)):
            lm, lsd = mean_sd(samples(a.work, tag, "llama", n_prompt, n_gen))
            fm, fsd = mean_sd(samples(a.work, tag, "frugal", n_prompt, n_gen))
            cells += [fmt_speed(lm, lsd), fmt_speed(fm, fsd), fmt_ratio(fm, lm)]
        lr = peak_rss_bytes(os.path.join(a.work, f"{tag}.llama.rss"))
        fr = peak_rss_bytes(os.path.join(a.work, f"{tag}.frugal.rss"))
        cells += [fmt_rss(lr), fmt_rss(fr), fmt_ratio(fr, lr)]
        rows.append("| " + " | ".join(cells) + " |")
    rows.append("")
    rows.append(
        f"tokens/s, mean ± sd over {a.rounds} alternating rounds x {a.reps} repetitions; {a.threads} threads; "
        f"speed ratio = frugal / llama.cpp (higher is better), RSS ratio = frugal / llama.cpp (lower is better); "
        f"load average before {a.load_before}, after {a.load_after}."
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
