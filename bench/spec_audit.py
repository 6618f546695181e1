#!/usr/bin/env python3
"""The layer-skipping audit: SWIFT self-speculation and ConfLayers early exit against vanilla decoding,
three seeds, wall-clock split into pure inference and online-search overhead.

For each seed s and each testbed prompt (task families x test seeds s*P .. s*P+P-1) it runs
`frugal run --task F --task-seed S --json` at temperature 0 five times, back to back:

  vanilla            plain decoding
  swift              --spec swift --spec-seed s: the skip set searched online
  conflayers         --spec conflayers: the exit layer chosen online by confidence
  swift frozen       --spec swift --spec-skip-set=<the set the swift run ended with>: no search
  conflayers frozen  --spec conflayers --spec-skip-set=<the exit the conflayers run ended with>

(the first three in an order rotated prompt by prompt, so background load falls on all alike). A
method's search overhead on a prompt is its decode time minus that of its frozen replay; its pure
inference cost is the replay's. Decode time is from the first generated token to the last (the
drafter's own prefill of the prompt and every search step fall in it); model loading and the
prompt's prefill by the target are outside it and the same for all. Per seed and method it reports
medians over prompts (the machine is shared: medians of paired per-prompt ratios are robust to
a run that met a busy moment), pooled acceptance and tokens per target step, accuracy on the tasks
with 95% Wilson intervals, and any greedy output that differs from vanilla's (an error: the
verification keeps plain decoding's tokens).

A script rather than a `frugal bench` mode: the replay needs the set each search ended with, per
prompt, which `run --json` reports (speculative.skip_set), and `bench` measures plain prefill and
decode by design (it refuses --spec), as bench/speculative.py does for the other drafters.

Usage: bench/spec_audit.py [--frugal build/bin/frugal] [-m models/default.gguf] [--seeds 0,1,2]
         [--prompts 6] [--families arithmetic,...] [--length 256] [-n 128] [--threads 2]
         [--spec-k 6] [--ignore-eos] [--json out.json]
       bench/spec_audit.py --from-json out.json      # the tables again
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kv_sweep_report import wilson  # noqa: E402  the interval every accuracy table here uses

FAMILIES = ["arithmetic", "kv_recall", "passkey", "var_track", "word_count"]
METHODS = ["vanilla", "swift", "conflayers"]


def run(args, family, task_seed, extra):
    cmd = [args.frugal, "run", "-m", args.model, "--task", family, "--task-seed", str(task_seed),
           "--task-length", str(args.length), "-n", str(args.n), "-t", str(args.threads), "--temp", "0",
           "--json"] + (["--ignore-eos"] if args.ignore_eos else []) + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    t, s = j["timings"], j["speculative"]
    return {"decode_ms": t["decode_ms"], "decode_tokens": t["decode_tokens"], "prefill_ms": t["prefill_ms"],
            "passes": s["passes"], "drafted": s["drafted"], "accepted": s["accepted"], "emitted": s["emitted"],
            "draft_ms": s["draft_ms"], "search_ms": s.get("search_ms", 0.0), "skip_set": s.get("skip_set", ""),
            "tokens": j["tokens"], "correct": bool(j["task"]["correct"])}


def measure(args):
    records = []  # one per (seed, family, prompt)
    families = [f for f in args.families.split(",") if f]
    spec = ["--spec-k", str(args.spec_k)]
    for seed in [int(s) for s in args.seeds.split(",")]:
        i = 0
        for family in families:
            for p in range(args.prompts):
                task_seed = seed * args.prompts + p
                configs = {
                    "vanilla": [],
                    "swift": ["--spec", "swift", "--spec-seed", str(seed)] + spec,
                    "conflayers": ["--spec", "conflayers"] + spec,
                }
                order = METHODS[i % 3:] + METHODS[:i % 3]
                i += 1
                rec = {"seed": seed, "family": family, "task_seed": task_seed}
                for name in order:
                    rec[name] = run(args, family, task_seed, configs[name])
                for name in ("swift", "conflayers"):
                    if not rec[name]["skip_set"]:  # nothing was drafted, so nothing searched: no overhead
                        rec[name + "_frozen"] = rec[name]
                        continue
                    rec[name + "_frozen"] = run(args, family, task_seed, configs[name] + [
                        "--spec-skip-set=" + rec[name]["skip_set"]])
                records.append(rec)
                print(f"seed {seed} {family} {task_seed}: " + ", ".join(
                    f"{k} {rec[k]['decode_ms']:.1f} ms" for k in
                    ("vanilla", "swift", "swift_frozen", "conflayers", "conflayers_frozen")), file=sys.stderr)
    return records


def summarize(records):
    rows = []
    seeds = sorted({r["seed"] for r in records})
    for seed in seeds + ["all"]:
        recs = [r for r in records if seed == "all" or r["seed"] == seed]
        for m in METHODS:
            frozen = m + "_frozen" if m != "vanilla" else None
            tot = {k: sum(r[m][k] for r in recs) for k in
                   ("decode_ms", "decode_tokens", "passes", "drafted", "accepted", "emitted", "search_ms")}
            row = {"seed": seed, "method": m, "n": len(recs),
                   "decode_tok_s": tot["decode_tokens"] / tot["decode_ms"] * 1e3,
                   "median_decode_ms": statistics.median(r[m]["decode_ms"] for r in recs),
                   "speed_vs_vanilla": statistics.median(r["vanilla"]["decode_ms"] / r[m]["decode_ms"]
                                                         for r in recs)}
            correct = sum(r[m]["correct"] for r in recs)
            lo, hi = wilson(correct, len(recs))
            row.update({"accuracy": correct / len(recs), "accuracy_lo": lo, "accuracy_hi": hi,
                        "mismatches": sum(r[m]["tokens"] != r["vanilla"]["tokens"] for r in recs)})
            if frozen:
                row.update({
                    "median_frozen_ms": statistics.median(r[frozen]["decode_ms"] for r in recs),
                    "inference_speed_vs_vanilla": statistics.median(
                        r["vanilla"]["decode_ms"] / r[frozen]["decode_ms"] for r in recs),
                    "median_overhead_ms": statistics.median(r[m]["decode_ms"] - r[frozen]["decode_ms"] for r in recs),
                    "overhead_share": statistics.median(
                        (r[m]["decode_ms"] - r[frozen]["decode_ms"]) / r[m]["decode_ms"] for r in recs),
                    "median_search_ms": statistics.median(r[m]["search_ms"] for r in recs),
                    "acceptance": tot["accepted"] / tot["drafted"] if tot["drafted"] else 0.0,
                    # Target steps: verify passes plus plain steps (one token each, nothing drafted).
                    "tokens_per_step": tot["decode_tokens"] / (tot["passes"] + tot["decode_tokens"] - tot["emitted"]),
                    "tokens_per_pass": tot["emitted"] / tot["passes"] if tot["passes"] else 0.0,
                    "frozen_mismatches": sum(r[frozen]["tokens"] != r["vanilla"]["tokens"] for r in recs),
                    "sets": sorted({r[m]["skip_set"] for r in recs}),
                })
            rows.append(row)
    return rows


def print_tables(rows, args):
    print(f"seeds {args['seeds']}; per seed {args['prompts']} prompts x {len(args['families'].split(','))} "
          f"families (test seeds s*{args['prompts']}..), length {args['length']}, -n {args['n']}, "
          f"{args['threads']} threads, temperature 0, spec-k {args['spec_k']}"
          + (", --ignore-eos" if args.get("ignore_eos") else ""))
    print("| seed | method | n | decode tok/s | median decode ms | speed vs vanilla (wall) | frozen: median ms | "
          "speed vs vanilla (pure inference) | search overhead ms (share) | search ms in drafter | acceptance | "
          "tokens / target step | tokens / verify pass | accuracy [95%] | outputs differing |")
    print("|" + "---|" * 15)
    for r in rows:
        acc = f"{r['accuracy']:.3f} [{r['accuracy_lo']:.3f}, {r['accuracy_hi']:.3f}]"
        if r["method"] == "vanilla":
            print(f"| {r['seed']} | vanilla | {r['n']} | {r['decode_tok_s']:.1f} | {r['median_decode_ms']:.1f} | 1.00 "
                  f"| - | 1.00 | - | - | - | 1.00 | - | {acc} | - |")
            continue
        print(f"| {r['seed']} | {r['method']} | {r['n']} | {r['decode_tok_s']:.1f} | {r['median_decode_ms']:.1f} | "
              f"{r['speed_vs_vanilla']:.2f} | {r['median_frozen_ms']:.1f} | {r['inference_speed_vs_vanilla']:.2f} | "
              f"{r['median_overhead_ms']:.1f} ({100 * r['overhead_share']:.0f}%) | {r['median_search_ms']:.1f} | "
              f"{r['acceptance']:.3f} | {r['tokens_per_step']:.2f} | {r['tokens_per_pass']:.2f} | {acc} | "
              f"{r['mismatches']} + {r['frozen_mismatches']} frozen |")
    print()
    for r in rows:
        if r["method"] != "vanilla" and r["seed"] == "all":
            print(f"{r['method']}: sets the searches ended with: {' '.join(r['sets'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default="build/bin/frugal")
    ap.add_argument("-m", "--model", default="models/default.gguf")
    ap.add_argument("--seeds", default="0,1,2", help="audit seeds: the search's seed and the prompt set")
    ap.add_argument("--prompts", type=int, default=6, help="prompts per family and seed")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--length", type=int, default=256, help="prompt length in tokens (the trained length)")
    ap.add_argument("-n", type=int, default=128, help="most tokens generated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spec-k", type=int, default=6)
    ap.add_argument("--ignore-eos", action="store_true",
                    help="generate -n tokens every time (longer decodes; accuracy then scores the padded text)")
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--from-json", help="print the tables of an earlier --json")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        print_tables(summarize(saved["records"]), saved["args"])
        return 0
    records = measure(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "records": records}, f)
    rows = summarize(records)
    print_tables(rows, vars(args))
    if any(r["mismatches"] or r.get("frozen_mismatches") for r in rows):
        print("error: speculative greedy output differs from plain decoding", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
