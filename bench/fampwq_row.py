#!/usr/bin/env python3
"""One markdown row for a quantized file scored by bench/fampwq_kld.sh or bench/fampwq_text.sh:
layer bpw, tensor bytes (bench/layer_bpw.py), Fisher cost (STEM.alloc, FAMPWQ files only), mean
KLD ± se, same top and PPL(Q) (STEM.kld, `frugal perplexity --kl-divergence` output), and with
--accuracy the testbed accuracy of STEM.eval.json with its Wilson 95% interval.

usage: bench/fampwq_row.py FILE.gguf STEM [--accuracy]
"""
import json
import math
import re
import subprocess
import sys

f, stem = sys.argv[1], sys.argv[2]
accuracy = "--accuracy" in sys.argv[3:]
bpw = subprocess.run(["python3", "bench/layer_bpw.py", f], capture_output=True, text=True).stdout.split()
kld = open(stem + ".kld").read()
g = lambda pat: re.search(pat, kld).groups()
k, kse = g(r"Mean +KLD: +([0-9.e-]+) ± +([0-9.e-]+)")
top, topse = g(r"Same top p: +([0-9.]+) ± +([0-9.]+)")
ppl, pplse = g(r"Mean PPL\(Q\) +: +([0-9.]+) ± +([0-9.]+)")
cost = "-"
try:
    m = re.search(r"total cost ([0-9.e+-]+)", open(stem + ".alloc").read())
    cost = m.group(1) if m else "-"
except OSError:
    pass
name = stem.split("/")[-1]
if not accuracy:
    print("| %s | %s | %s | %s | %s ± %s | %s ± %s | %s ± %s |" % (
        name, bpw[1], bpw[3], cost, k, kse, top, topse, ppl, pplse))
    sys.exit(0)
ex = [e for r in json.load(open(stem + ".eval.json")) for e in r["examples"]]
n, c = len(ex), sum(e["correct"] for e in ex)
p, z = c / n, 1.96
den = 1 + z * z / n
mid = (p + z * z / (2 * n)) / den
half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
print("| %s | %s | %s | %s | %s ± %s | %s ± %s | %.0f ± %.0f | %.1f [%.1f, %.1f] (n=%d) |" % (
    name, bpw[1], bpw[3], cost, k, kse, top, topse, float(ppl), float(pplse),
    100 * p, 100 * (mid - half), 100 * (mid + half), n))
