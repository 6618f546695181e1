#!/usr/bin/python3
"""Finds held-out documents that have near-copies on the training side and writes the held-out
text without them.

The corpus is split by document, but some sources ship the same text twice in different dress
(Perl's POD files and the manual pages rendered from them; SQL reference pages as HTML and as
manual pages), and those pairs can land on both sides. A held-out document counts as seen when
more than --max-overlap of its 8-word shingles occur in the training text. Output in DIR:
  heldout_clean.txt   the held-out documents under the threshold, joined by blank lines
  heldout_sample.txt  every --sample-every-th of those (a spread sample that scores in minutes)
  overlap.json        per held-out document: characters, shingles, fraction seen, kept or not

  /usr/bin/python3 train/text/heldout_overlap.py DIR [--max-overlap 0.5]
"""
import argparse
import json
import os
import re

N = 8


def shingles(text):
    words = re.findall(r"\w+", text.lower())
    return {hash(tuple(words[i:i + N])) for i in range(len(words) - N + 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--max-overlap", type=float, default=0.5)
    ap.add_argument("--sample-every", type=int, default=8)
    a = ap.parse_args()
    seen = set()
    with open(os.path.join(a.dir, "train.txt"), encoding="utf-8") as f:
        for doc in f.read().split("\x00"):
            seen |= shingles(doc)
    with open(os.path.join(a.dir, "heldout.txt"), encoding="utf-8") as f:
        docs = [d for d in f.read().split("\x00") if d]
    report, kept = [], []
    for d in docs:
        sh = shingles(d)
        frac = len(sh & seen) / max(1, len(sh))
        keep = frac <= a.max_overlap
        report.append({"chars": len(d), "shingles": len(sh), "seen": round(frac, 4), "kept": keep,
                       "first_line": d.split("\n", 1)[0][:80]})
        if keep:
            kept.append(d)
    with open(os.path.join(a.dir, "heldout_clean.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(kept))
    with open(os.path.join(a.dir, "heldout_sample.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(kept[::a.sample_every]))
    with open(os.path.join(a.dir, "overlap.json"), "w") as f:
        json.dump(report, f, indent=0)
    dropped = [r for r in report if not r["kept"]]
    print("held-out documents %d, kept %d (%d chars), dropped %d (%d chars) above %.0f%% seen" % (
        len(docs), len(kept), sum(len(d) for d in kept), len(dropped), sum(r["chars"] for r in dropped),
        100 * a.max_overlap))


if __name__ == "__main__":
    main()
