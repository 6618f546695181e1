#!/usr/bin/env python3
"""Reads the raw outputs cpu_vs_llamacpp.sh leaves in its work folder and prints a markdown table.

Files per model (TAG = 00, 01, ...):
  TAG.model                 label, type, path, 1-minute load average at its start (tab-separated)
  TAG.llama.R.json          llama-bench -o json of round R
  TAG.frugal.R.json         frugal bench --json of round R
  TAG.llama.rss, TAG.frugal.rss   GNU time -v output of one generation
  kvNN.kvmodel              label, path, load average (quantized-KV table)
  kvNN.DEPTH.QUANT.json     frugal bench --json of one (context, cache type)
Decode is also given as a fraction of the memory roofline: frugal bench measures the machine's read
bandwidth with the same threads after its tests and reports the weight bytes a decode step reads;
both engines' tg figures are that many bytes per token over the median bandwidth of the rounds.
Throughput is the median over every sample of every round (tokens/s) with the samples' standard
deviation: on a shared machine a burst of someone else's work slows a few samples a lot, which
moves a mean but hardly a median. Ratios are frugal / llama.cpp of the medians, and frugal /
llama.cpp of peak memory (lower is better there).
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
    # The value starts at the first '[' or '{' that parses; later ones are inside it.
    starts = sorted(m.start() for m in re.finditer(r"[\[{]", text))
    decoder = json.JSONDecoder()
    for start in starts:
        try:
            return decoder.raw_decode(text[start:])[0]
        except json.JSONDecodeError:
            continue
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


def median_sd(xs):
    if not xs:
        return None, None
    ys = sorted(xs)
    n = len(ys)
    med = ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2
    m = sum(ys) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in ys) / (n - 1)) if n > 1 else 0.0
    return med, sd


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


def roofline(work, tag):
    """(median read bandwidth in bytes/s, weight bytes per token) from frugal's JSON, or Nones."""
    bws, bpt = [], None
    for path in sorted(glob.glob(os.path.join(work, f"{tag}.frugal.*.json"))):
        data = load_json(path)
        if not isinstance(data, dict):
            continue
        bw = (data.get("cpu") or {}).get("read_bytes_per_s")
        if bw:
            bws.append(float(bw))
        bpt = data.get("weight_bytes_per_token", bpt)
    med, _ = median_sd(bws)
    return med, bpt


def fmt_fraction(tps, bw, bpt):
    if tps is None or not bw or not bpt:
        return "n/a"
    return f"{100 * tps * bpt / bw:.0f}%"


def kv_table(work):
    """Decode tok/s per (model, context) for F16/int8/int4/hyquant/hbq caches, and the ratios to F16."""
    quants = ["none", "int8", "int4", "hyquant", "hbq"]
    rows = [
        "| model | context | F16 tok/s | int8 tok/s | int4 tok/s | hyquant tok/s | hbq tok/s | int8 / F16 "
        "| int4 / F16 | hyquant / F16 | hbq / F16 | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    any_row = False
    for model_file in sorted(glob.glob(os.path.join(work, "kv*.kvmodel"))):
        tag = os.path.basename(model_file)[: -len(".kvmodel")]
        with open(model_file, encoding="utf-8") as f:
            fields = f.read().rstrip("\n").split("\t")
        label, load = fields[0], fields[2] if len(fields) > 2 else "?"
        depths = sorted({int(os.path.basename(p).split(".")[1])
                         for p in glob.glob(os.path.join(work, f"{tag}.*.*.json"))})
        for d in depths:
            meds = {}
            for q in quants:
                data = load_json(os.path.join(work, f"{tag}.{d}.{q}.json"))
                xs = []
                if isinstance(data, dict):
                    for t in data.get("tests", []):
                        if t.get("n_gen", 0) > 0:
                            xs.extend(float(x) for x in t.get("samples_ts", []))
                meds[q] = median_sd(xs)
            cells = [label, str(d)] + [fmt_speed(*meds[q]) for q in quants]
            cells += [fmt_ratio(meds[q][0], meds["none"][0]) for q in quants[1:]] + [load]
            rows.append("| " + " | ".join(cells) + " |")
            any_row = True
    return rows if any_row else []


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
    return "n/a" if n is None else f"{n / 1e6:.1f}"


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
        f"| {tg} ratio | {tg} of bandwidth llama.cpp | {tg} of bandwidth frugal | read bandwidth (GB/s) "
        f"| peak RSS llama.cpp (MB) | peak RSS frugal (MB) | RSS ratio | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model_file in sorted(glob.glob(os.path.join(a.work, "*.model"))):
        tag = os.path.basename(model_file)[: -len(".model")]
        with open(model_file, encoding="utf-8") as f:
            fields = f.read().rstrip("\n").split("\t")
        label, typ, path = fields[:3]
        load = fields[3] if len(fields) > 3 else "?"
        try:
            size = os.path.getsize(path)
        except OSError:
            size = None
        if typ == "-":  # a given file: the tensor types frugal reports
            for path_json in sorted(glob.glob(os.path.join(a.work, f"{tag}.frugal.*.json"))):
                data = load_json(path_json)
                if isinstance(data, dict) and data.get("types"):
                    typ = data["types"]
                    break
        cells = [label, typ, fmt_size(size)]
        for n_prompt, n_gen in ((a.pp, 0), (0, a.tg)):
            lm, lsd = median_sd(samples(a.work, tag, "llama", n_prompt, n_gen))
            fm, fsd = median_sd(samples(a.work, tag, "frugal", n_prompt, n_gen))
            cells += [fmt_speed(lm, lsd), fmt_speed(fm, fsd), fmt_ratio(fm, lm)]
        bw, bpt = roofline(a.work, tag)
        cells += [fmt_fraction(lm, bw, bpt), fmt_fraction(fm, bw, bpt), "n/a" if not bw else f"{bw / 1e9:.1f}"]
        lr = peak_rss_bytes(os.path.join(a.work, f"{tag}.llama.rss"))
        fr = peak_rss_bytes(os.path.join(a.work, f"{tag}.frugal.rss"))
        rss_ratio = "n/a" if lr is None or fr is None else f"{fr / lr:.3f}x"
        cells += [fmt_rss(lr), fmt_rss(fr), rss_ratio, load]
        rows.append("| " + " | ".join(cells) + " |")
    rows.append("")
    rows.append(
        f"tokens/s, median ± sd of {a.rounds} alternating rounds x {a.reps} repetitions; {a.threads} threads; "
        f"speed ratio = frugal / llama.cpp of the medians (higher is better), RSS ratio = frugal / llama.cpp (lower is better); "
        f"load = 1-minute load average when the model's measurements began; "
        f"load average (1, 5, 15 min) before {a.load_before}, after {a.load_after}."
    )
    targets = sorted({(load_json(p) or {}).get("cpu", {}).get("simd_target") or "?"
                      for p in glob.glob(os.path.join(a.work, "*.frugal.*.json"))
                      if isinstance(load_json(p), dict)})
    if targets:
        rows[-1] += f" frugal's SIMD target: {', '.join(targets)}."
    kv = kv_table(a.work)
    if kv:
        rows += ["", "Quantized KV cache (frugal): decode tok/s at each context, keep-everything cache filled with "
                 "random rows (`frugal bench -p 0 -n N -d CONTEXT --fill-depth --kv-quant Q`), median ± sd of the "
                 "repetitions; ratio = cache type / F16 (higher is better)", ""] + kv
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
