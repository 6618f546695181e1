#!/usr/bin/env python3
"""Paired comparison of two `frugal perplexity --kl-divergence --kl-values FILE` outputs.

Both files hold one KLD per scored position, window after window, against the same base, so
they pair up line by line. Positions within a window are not independent, so the interval is
taken over window means: mean of the per-window differences (B - A) +- 1.96 standard errors.

usage: paired_kld.py --windows N A.vals B.vals [C.vals ...]   (each later file against A)
"""
import argparse
import math
import sys


def read(path):
    with open(path) as f:
        return [float(line) for line in f if line.strip()]


def window_means(vals, n):
    if len(vals) % n != 0:
        sys.exit(f"{len(vals)} values do not split into {n} equal windows")
    w = len(vals) // n
    return [sum(vals[i * w:(i + 1) * w]) / w for i in range(n)]


def mean_ci(xs):
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, 1.96 * math.sqrt(var / len(xs))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--windows", type=int, required=True)
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    ref = read(a.files[0])
    ref_w = window_means(ref, a.windows)
    m, ci = mean_ci(ref_w)
    print(f"{a.files[0]}: mean KLD {sum(ref) / len(ref):.6f}, window means {m:.6f} +- {ci:.6f} (n = {a.windows})")
    for path in a.files[1:]:
        vals = read(path)
        if len(vals) != len(ref):
            sys.exit(f"{path}: {len(vals)} values, {a.files[0]} has {len(ref)}")
        d = [b - r for b, r in zip(window_means(vals, a.windows), ref_w)]
        dm, dci = mean_ci(d)
        base = sum(ref) / len(ref)
        print(f"{path}: mean KLD {sum(vals) / len(vals):.6f}, delta vs first {dm:+.6f} +- {dci:.6f} "
              f"({100 * dm / base:+.1f} %), n = {a.windows} windows")


if __name__ == "__main__":
    main()
