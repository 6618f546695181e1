#!/usr/bin/env python3
"""Speculative decoding on the natural-text model (models/text.gguf) with its draft
(models/text-draft.gguf) and with prompt lookup, against plain decoding, on prompts cut from
held-out documents: greedy output identity, decode tok/s, acceptance and tokens per verify pass.

  python3 bench/speculative_text.py HELDOUT_CLEAN.txt [--prompts 12] [-n 128] [-t 1]

HELDOUT_CLEAN.txt: train/text/heldout_overlap.py's heldout_clean.txt. Each prompt is the first
300 characters of one of --prompts documents spread over the file; the three configurations run
back to back per prompt. Ratios are medians over prompts of (configuration / plain) tok/s.
"""
import argparse
import json
import statistics
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("heldout")
ap.add_argument("--frugal", default="build/bin/frugal")
ap.add_argument("-m", "--model", default="models/text.gguf")
ap.add_argument("--draft", default="models/text-draft.gguf")
ap.add_argument("--prompts", type=int, default=12)
ap.add_argument("-n", type=int, default=128)
ap.add_argument("-t", "--threads", type=int, default=1)
a = ap.parse_args()

docs = [d for d in open(a.heldout, encoding="utf-8").read().split("\n\n") if len(d) > 400]
prompts = [docs[i * len(docs) // a.prompts][:300] for i in range(a.prompts)]
configs = {"plain": [], "draft": ["--spec", "draft", "--draft", a.draft], "ngram": ["--spec", "ngram"]}
rows = {c: [] for c in configs}
identical = 0
for i, p in enumerate(prompts):
    texts = {}
    for c, extra in configs.items():
        out = subprocess.run([a.frugal, "run", "-m", a.model, "-p", p, "-n", str(a.n), "--temp", "0", "--json",
                              "-t", str(a.threads)] + extra, capture_output=True, text=True, check=True)
        d = json.loads(out.stdout)
        texts[c] = d["text"]
        sp = d.get("speculative") or {}
        rows[c].append((d["timings"]["decode_tok_s"], sp.get("acceptance_rate"), sp.get("tokens_per_pass")))
    same = all(texts[c] == texts["plain"] for c in configs)
    identical += same
    print("prompt %d: %s" % (i, "identical" if same else "DIFFERENT"), flush=True)
print("greedy identical on %d of %d prompts" % (identical, len(prompts)))
base = [r[0] for r in rows["plain"]]
print("| configuration | decode tok/s (median) | speed vs plain (median of ratios) | acceptance | tokens per verify pass |")
print("|---|---:|---:|---:|---:|")
for c in configs:
    ratio = statistics.median(r[0] / b for r, b in zip(rows[c], base))
    acc = [r[1] for r in rows[c] if r[1] is not None and c != "plain"]
    tpp = [r[2] for r in rows[c] if r[2] is not None and c != "plain"]
    print("| %s | %.1f | %.2f | %s | %s |" % (c, statistics.median(r[0] for r in rows[c]), ratio,
          "%.3f" % statistics.median(acc) if acc else "-", "%.2f" % statistics.median(tpp) if tpp else "-"))
