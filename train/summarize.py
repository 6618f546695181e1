"""Prints the accuracy tables of a training run's results.json as markdown (for models/README.md)."""
import json
import sys


def table(ev):
    fams = list(ev)
    lengths = list(ev[fams[0]])
    out = ["| task | " + " | ".join("L=%s" % L for L in lengths) + " |",
           "|---|" + "---|" * len(lengths)]
    for f in fams:
        cells = []
        for L in lengths:
            c = ev[f][L]
            cells.append("%.1f%% (%.0f%%)" % (100 * c["correct"] / c["n"], 100 * c["full_match"] / c["n"]))
        out.append("| %s | %s |" % (f, " | ".join(cells)))
    return "\n".join(out)


def main(path):
    r = json.load(open(path))
    print("steps %d, tokens %.1f M, %.0f s" % (r["steps"], r["tokens"] / 1e6, r["train_seconds"]))
    for name, ev in r["eval"].items():
        n = ev[next(iter(ev))][next(iter(ev[next(iter(ev))]))]["n"]
        print("\n%s (%d params), n=%d per cell: final-answer accuracy (full scratchpad match)\n" % (
            name, r["params"][name], n))
        print(table(ev))


if __name__ == "__main__":
    main(sys.argv[1])
