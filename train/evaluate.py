"""Greedy evaluation of a model on test-split task examples, scored by the rules of
src/frugal/eval/score.h (restated in score_completion below)."""
import contextlib

import torch

import data
import vocab


def amp(device):
    """bf16 autocast on CUDA; plain float32 elsewhere."""
    if device.startswith("cuda"):
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def extract_final_answer(completion):
    """The first line starting with "A:" (after leading spaces/tabs); its rest, whitespace-trimmed.
    Returns (found, answer)."""
    for line in completion.split("\n"):
        s = line.lstrip(" \t")
        if s.startswith("A:"):
            return True, s[2:].strip(" \t\r\n")
    return False, ""


def score_completion(example, completion):
    found, got = extract_final_answer(completion)
    correct = found and got == example["final_answer"]
    full = False
    if found:
        lines = completion.split("\n")
        for i, line in enumerate(lines):
            if line.lstrip(" \t").startswith("A:"):
                full = "\n".join(lines[:i + 1]).strip(" \t\r\n") == example["answer"].strip(" \t\r\n")
                break
    return {"found": found, "correct": correct, "full_match": full, "extracted": got}


@torch.no_grad()
def greedy(model, prompts, max_new, device):
    """Greedy completions (token ids, EOS excluded) of several prompts at once, with a KV cache."""
    ids = [vocab.encode(p) for p in prompts]
    lens = torch.tensor([len(x) for x in ids], device=device)
    T = int(lens.max())
    toks = torch.zeros(len(ids), T, dtype=torch.long, device=device)
    for i, x in enumerate(ids):
        toks[i, :len(x)] = torch.tensor(x, device=device)
    logits, caches = model.prefill_cache(toks, T + max_new)
    rows = torch.arange(len(ids), device=device)
    nxt = logits[rows, lens - 1].float().argmax(-1)
    out = torch.zeros(len(ids), max_new, dtype=torch.long, device=device)
    done = torch.zeros(len(ids), dtype=torch.bool, device=device)
    for step in range(max_new):
        out[:, step] = nxt
        done |= nxt == vocab.EOS
        if bool(done.all()) or step == max_new - 1:
            break
        nxt = model.decode_step(nxt, lens + step, caches).float().argmax(-1)
    result = []
    for r in out.tolist():
        result.append(r[:r.index(vocab.EOS)] if vocab.EOS in r else r)
    return result


def evaluate(model, gen_bin, families, lengths, n, device, batch=128, log=print):
    """Returns {family: {length: {"n", "correct", "full_match", "failures": [...]}}}."""
    model.eval()
    results = {}
    for fam in families:
        results[fam] = {}
        for L in lengths:
            exs = data.test_examples(gen_bin, fam, L, n)
            correct = full = 0
            failures = []
            for i in range(0, len(exs), batch):
                chunk = exs[i:i + batch]
                max_new = max(len(e["answer"]) for e in chunk) + 8
                with amp(device):
                    comps = greedy(model, [e["prompt"] for e in chunk], max_new, device)
                for e, c in zip(chunk, comps):
                    text = vocab.decode(c)
                    s = score_completion(e, text)
                    correct += s["correct"]
                    full += s["full_match"]
                    if not s["correct"] and len(failures) < 3:
                        failures.append({"seed": e["seed"], "expected": e["answer"], "got": text})
            results[fam][L] = {"n": len(exs), "correct": correct, "full_match": full,
                               "failures": failures}
            log("eval %-10s L=%-5d acc %.3f full %.3f (n=%d)" % (
                fam, L, correct / max(1, len(exs)), full / max(1, len(exs)), len(exs)))
    model.train()
    return results
