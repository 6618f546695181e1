#!/usr/bin/env python3
"""Speculative decoding against plain decoding on testbed prompts, measured in the same run.

For each prompt (task families x seeds, test split) runs `frugal run --task F --task-seed S --json`
once per configuration -- plain, the draft model, n-gram lookup, the model with layers skipped --
interleaved prompt by prompt so
that background load falls on all of them alike, and reports per configuration: decode tokens per
second (tokens after the first over the time from the first token to the last, which includes the
draft model's own prefill of the prompt), the speed-up over plain decoding of the same prompts,
end-to-end time (prefill + decode), acceptance rate (kept draft tokens over drafted ones) and
tokens per target pass, and where decode time goes: milliseconds per target step (a verify pass, or
a plain pass where nothing was drafted) and drafting milliseconds per verify pass. Greedy outputs are compared with plain decoding's: any difference is
reported as an error (the exactness tests in tests/decode assert it).

Usage: bench/speculative.py [--frugal build/bin/frugal] [-m models/default.gguf]
         [--draft models/draft.gguf] [--families arithmetic,kv_recall,...] [--seeds 10]
         [--length 256] [-n 128] [--threads 2] [--spec-k 6] [--json out.json]
         [--device cpu|cuda] [--configs plain,draft,ngram,layerskip]
On --device cuda the target runs on the GPU and the draft model on the CPU (layerskip is not
available there).
"""
import argparse
import json
import subprocess
import sys

FAMILIES = ["arithmetic", "kv_recall", "passkey", "var_track", "word_count"]


def run(args, family, seed, extra):
    cmd = [args.frugal, "run", "-m", args.model, "--task", family, "--task-seed", str(seed),
           "--task-length", str(args.length), "-n", str(args.n), "-t", str(args.threads), "--temp", "0",
           "--json", "--device", args.device] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default="build/bin/frugal")
    ap.add_argument("-m", "--model", default="models/default.gguf")
    ap.add_argument("--draft", default="models/draft.gguf")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--seeds", type=int, default=10, help="prompts per family (test seeds 0..N-1)")
    ap.add_argument("--length", type=int, default=256, help="prompt length in tokens (the trained length)")
    ap.add_argument("-n", type=int, default=128, help="most tokens generated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spec-k", type=int, default=6)
    ap.add_argument("--json", help="write the totals here")
    ap.add_argument("--device", default="cpu", help="the target's backend: cpu or cuda")
    ap.add_argument("--configs", default="plain,draft,ngram,layerskip",
                    help="configurations to run, plain first (the baseline)")
    args = ap.parse_args()

    configs = {
        "plain": [],
        "draft": ["--spec", "draft", "--draft", args.draft, "--spec-k", str(args.spec_k)],
        "ngram": ["--spec", "ngram", "--spec-k", str(args.spec_k)],
        "layerskip": ["--spec", "layerskip", "--spec-k", str(args.spec_k)],
    }
    wanted = [c for c in args.configs.split(",") if c]
    if not wanted or wanted[0] != "plain" or any(c not in configs for c in wanted):
        ap.error(f"--configs: plain first, then any of {', '.join(configs)}")
    configs = {c: configs[c] for c in wanted}
    totals = {c: {"decode_ms": 0.0, "decode_tokens": 0, "total_ms": 0.0, "passes": 0, "drafted": 0,
                  "accepted": 0, "emitted": 0, "draft_ms": 0.0, "mismatches": 0} for c in configs}
    families = [f for f in args.families.split(",") if f]
    for family in families:
        for seed in range(args.seeds):
            plain_tokens = None
            for name, extra in configs.items():
                j = run(args, family, seed, extra)
                t, s = j["timings"], j["speculative"]
                tot = totals[name]
                tot["decode_ms"] += t["decode_ms"]
                tot["decode_tokens"] += t["decode_tokens"]
                tot["total_ms"] += t["prefill_ms"] + t["decode_ms"]
                for k in ("passes", "drafted", "accepted", "emitted", "draft_ms"):
                    tot[k] += s[k]
                if name == "plain":
                    plain_tokens = j["tokens"]
                elif j["tokens"] != plain_tokens:
                    tot["mismatches"] += 1
            print(f"{family} seed {seed} done", file=sys.stderr)

    base = totals["plain"]
    base_tps = base["decode_tokens"] / base["decode_ms"] * 1e3
    print(f"{len(families)} families x {args.seeds} prompts, length {args.length}, -n {args.n}, "
          f"{args.threads} threads, device {args.device}, temperature 0, spec-k {args.spec_k}")
    print(f"{'config':9} {'decode tok/s':>12} {'speed-up':>9} {'end-to-end':>11} {'acceptance':>11} "
          f"{'tok/pass':>9} {'ms/pass':>8} {'draft ms':>9} {'mismatch':>9}")
    for name, tot in totals.items():
        tps = tot["decode_tokens"] / tot["decode_ms"] * 1e3
        acc = tot["accepted"] / tot["drafted"] if tot["drafted"] else 0.0
        tpp = tot["emitted"] / tot["passes"] if tot["passes"] else 1.0
        e2e = base["total_ms"] / tot["total_ms"]
        tot.update({"decode_tok_s": tps, "speedup": tps / base_tps, "end_to_end_speedup": e2e,
                    "acceptance_rate": acc, "tokens_per_pass": tpp})
        # Per decode step: a plain pass, or drafting plus the verify pass (the step's other passes,
        # plain ones where nothing was drafted, are counted in the plain share).
        steps = tot["passes"] + (tot["decode_tokens"] - tot["emitted"])
        ms_pass = (tot["decode_ms"] - tot["draft_ms"]) / steps if steps else 0.0
        draft_per_pass = tot["draft_ms"] / tot["passes"] if tot["passes"] else 0.0
        tot.update({"target_ms_per_step": ms_pass, "draft_ms_per_pass": draft_per_pass})
        print(f"{name:9} {tps:12.1f} {tps / base_tps:8.2f}x {e2e:10.2f}x {acc:11.3f} {tpp:9.2f} "
              f"{ms_pass:8.3f} {draft_per_pass:9.3f} {tot['mismatches']:9d}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "totals": totals}, f, indent=1)
    if any(t["mismatches"] for t in totals.values()):
        print("error: speculative greedy output differs from plain decoding", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
