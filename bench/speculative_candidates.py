#!/usr/bin/env python3
"""Multi-candidate speculative sampling (standard rule and ResiSpec) against one draft and plain decoding.

For each testbed prompt (task families x prompt seeds, test split) and each sampling seed, runs
`frugal run --task F --task-seed S --seed R --temp T --ignore-eos --json` once per configuration --
plain decoding, the draft model with one draft per verify pass, and the draft model with N
candidate drafts per pass under each rule (--spec-candidates N --spec-rule standard|resispec) --
back to back, prompt by prompt, so that the load of a shared machine falls on every configuration
alike. Reports per configuration, summed over all runs: accepted draft tokens per target pass
(the acceptance length), tokens per target pass (accepted + the target's own), decode tokens per
second, and the speed-ups over plain decoding, over one draft, and of ResiSpec over the standard
rule at the same candidate count, each with a 95% bootstrap interval over the runs (resampling
runs, the ratio of sums), and the paired differences of accepted tokens per pass (same prompt and
sampling seed) against one draft and of ResiSpec against the standard rule, with their intervals.
--from-json prints the table again from runs saved with --json. At temperature 0 the outputs are also compared with plain decoding's:
any difference is an error.

Usage: bench/speculative_candidates.py [--frugal build/bin/frugal] [-m models/default.gguf]
         [--draft models/draft.gguf] [--families arithmetic,...] [--prompts 5] [--sampling-seeds 2]
         [--temps 1,0.7] [--candidates 2,4] [--length 256] [-n 128] [--threads 2] [--spec-k 6]
         [--json out.json]
"""
import argparse
import json
import random
import subprocess
import sys

FAMILIES = ["arithmetic", "kv_recall", "passkey", "var_track", "word_count"]


def run(args, family, seed, sampling_seed, temp, extra):
    cmd = [args.frugal, "run", "-m", args.model, "--task", family, "--task-seed", str(seed),
           "--task-length", str(args.length), "-n", str(args.n), "-t", str(args.threads), "--temp", str(temp),
           "--seed", str(sampling_seed), "--ignore-eos", "--json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def ratio_interval(num, den, reps=2000, rng=None):
    """sum(num) / sum(den) with a 95% bootstrap interval over paired runs."""
    rng = rng or random.Random(0)
    n = len(num)
    point = sum(num) / sum(den)
    boots = []
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        d = sum(den[i] for i in idx)
        boots.append(sum(num[i] for i in idx) / d if d else float("nan"))
    boots.sort()
    return point, boots[int(0.025 * reps)], boots[int(0.975 * reps) - 1]


def mean_interval(vals, reps=4000, rng=None):
    """Mean of paired differences with a 95% bootstrap interval."""
    rng = rng or random.Random(1)
    n = len(vals)
    boots = sorted(sum(vals[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    return sum(vals) / n, boots[int(0.025 * reps)], boots[int(0.975 * reps) - 1]


def fmt_ci(t, digits=2):
    p, lo, hi = t
    return f"{p:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default="build/bin/frugal")
    ap.add_argument("-m", "--model", default="models/default.gguf")
    ap.add_argument("--draft", default="models/draft.gguf")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--prompts", type=int, default=5, help="prompts per family (test seeds 0..N-1)")
    ap.add_argument("--sampling-seeds", type=int, default=2, help="sampling seeds per prompt (0..N-1)")
    ap.add_argument("--temps", default="1,0.7")
    ap.add_argument("--candidates", default="2,4")
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("-n", type=int, default=128, help="tokens generated (--ignore-eos)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spec-k", type=int, default=6)
    ap.add_argument("--json", help="write every run's numbers here")
    ap.add_argument("--from-json", help="print the table of runs saved by --json instead of running")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        for k, v in saved["args"].items():
            if k not in ("json", "from_json"):
                setattr(args, k, v)

    draft = ["--spec", "draft", "--draft", args.draft, "--spec-k", str(args.spec_k)]
    configs = {"plain": [], "draft x1": draft}
    for c in [int(x) for x in args.candidates.split(",") if x]:
        for rule in ("standard", "resispec"):
            configs[f"x{c} {rule}"] = draft + ["--spec-candidates", str(c), "--spec-rule", rule]
    families = [f for f in args.families.split(",") if f]
    temps = [float(t) for t in args.temps.split(",") if t]
    runs = {t: {c: [] for c in configs} for t in temps}
    mismatches = 0
    if args.from_json:
        runs = {float(t): v for t, v in saved["runs"].items()}
        temps = []  # nothing to run
    for temp in temps:
        for family in families:
            for seed in range(args.prompts):
                for rs in range(args.sampling_seeds):
                    plain_tokens = None
                    for name, extra in configs.items():
                        j = run(args, family, seed, rs, temp, extra)
                        t, s = j["timings"], j["speculative"]
                        runs[temp][name].append({
                            "family": family, "seed": seed, "sampling_seed": rs,
                            "decode_ms": t["decode_ms"], "decode_tokens": t["decode_tokens"],
                            "passes": s["passes"], "accepted": s["accepted"], "emitted": s["emitted"],
                            "drafted": s["drafted"], "other_chain": s.get("other_chain", 0)})
                        if name == "plain":
                            plain_tokens = j["tokens"]
                        elif temp == 0 and j["tokens"] != plain_tokens:
                            mismatches += 1
            print(f"temp {temp} {family} done", file=sys.stderr)

    print(f"{len(families)} families x {args.prompts} prompts x {args.sampling_seeds} sampling seeds, length "
          f"{args.length}, -n {args.n} (--ignore-eos), {args.threads} threads, spec-k {args.spec_k}; "
          "95% bootstrap intervals over runs")
    print("| temp | config | accepted / pass | tokens / pass | decode tok/s | speed vs plain | speed vs x1 | "
          "speed resispec / standard | paired accepted/pass vs x1 | paired accepted/pass resispec - standard | "
          "other chain kept |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for temp in sorted(runs, reverse=True):
        r = runs[temp]
        # Speed ratios: time per token of the reference over this config's, run by run.
        def speed(name, ref):
            a, b = r[name], r[ref]
            return ratio_interval([x["decode_ms"] / x["decode_tokens"] for x in b],
                                  [x["decode_ms"] / x["decode_tokens"] for x in a])
        for name in configs:
            rows = r[name]
            tps = sum(x["decode_tokens"] for x in rows) / sum(x["decode_ms"] for x in rows) * 1e3
            if name == "plain":
                print(f"| {temp} | plain | - | 1.00 | {tps:.1f} | 1.00 | - | - | - | - | - |")
                continue
            per_pass = lambda x: x["accepted"] / x["passes"] if x["passes"] else 0.0  # noqa: E731
            d_x1 = "-"
            if name != "draft x1":
                d_x1 = fmt_ci(mean_interval([per_pass(a) - per_pass(b) for a, b in zip(rows, r["draft x1"])]))
            d_std = "-"
            if name.endswith("resispec"):
                ref = r[name.replace("resispec", "standard")]
                d_std = fmt_ci(mean_interval([per_pass(a) - per_pass(b) for a, b in zip(rows, ref)]))
            acc = ratio_interval([x["accepted"] for x in rows], [x["passes"] for x in rows])
            tpp = ratio_interval([x["emitted"] for x in rows], [x["passes"] for x in rows])
            vs_x1 = fmt_ci(speed(name, "draft x1")) if name != "draft x1" else "-"
            vs_std = "-"
            if name.endswith("resispec"):
                vs_std = fmt_ci(speed(name, name.replace("resispec", "standard")))
            other = sum(x["other_chain"] for x in rows) / max(1, sum(x["passes"] for x in rows))
            print(f"| {temp} | {name} | {fmt_ci(acc)} | {fmt_ci(tpp)} | {tps:.1f} | {fmt_ci(speed(name, 'plain'))} | "
                  f"{vs_x1} | {vs_std} | {d_x1} | {d_std} | {other:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": {str(t): v for t, v in runs.items()}}, f, indent=1)
    if mismatches:
        print(f"error: {mismatches} speculative greedy outputs differ from plain decoding", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
