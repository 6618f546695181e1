"""Trains the project's own models on the C++ task generators and exports them as GGUF.

One process trains the default model and the draft model side by side on the same batches (the
draft costs a fraction of the default's compute), for a fixed wall-clock budget: the learning rate
follows the fraction of the budget spent, so a run ends on schedule whatever the throughput.
Checkpoints (full state, for --resume) go to --ckpt-dir; GGUF exports (usable as weights-only
checkpoints through --init-default/--init-draft) go to --out every --export-every seconds.

  python3 train/train.py --gen-bin build-train/gen_data --out OUT --time-budget 480
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import evaluate  # noqa: E402
import export_gguf  # noqa: E402
import vocab  # noqa: E402
from model import Config, Transformer  # noqa: E402

FAMILIES = ["passkey", "kv_recall", "var_track", "arithmetic", "word_count"]


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--gen-bin", default="build-train/gen_data")
    p.add_argument("--out", required=True)
    p.add_argument("--ckpt-dir", default=None, help="full checkpoints (default: OUT/ckpt)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--time-budget", type=float, default=480, help="training seconds")
    p.add_argument("--export-every", type=float, default=120)
    p.add_argument("--tokens-per-step", type=int, default=1 << 18)
    p.add_argument("--buckets", default="256:0.15,512:0.2,1024:0.3,2048:0.35",
                   help="row length:token share")
    p.add_argument("--curriculum", type=float, default=0.08,
                   help="fraction of the budget trained on the two shortest buckets only")
    p.add_argument("--data-tokens", type=float, default=1.5e9)
    p.add_argument("--mix", default="passkey=0.6,kv_recall=1,var_track=1.2,arithmetic=1.2,word_count=1.4")
    p.add_argument("--prompt-weight", type=float, default=0.2,
                   help="weight of the mean prompt-token loss next to the mean answer-token loss")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--draft-lr", type=float, default=3e-3)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--default-shape", default="6,384,6,2,768", help="layers,dim,heads,kv_heads,ffn")
    p.add_argument("--draft-shape", default="2,256,4,2,512")
    p.add_argument("--no-draft", action="store_true")
    p.add_argument("--draft-every", type=int, default=2, help="train the draft on every k-th batch")
    p.add_argument("--eval-n", type=int, default=100)
    p.add_argument("--eval-lengths", default="256,512,1024,2048")
    p.add_argument("--draft-eval-n", type=int, default=50)
    p.add_argument("--probe-every", type=float, default=150, help="seconds between quick evals")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--procs", type=int, default=os.cpu_count() or 4)
    p.add_argument("--resume", default=None, help="full checkpoint from --ckpt-dir")
    p.add_argument("--init-default", default=None, help="start the default model from this GGUF")
    p.add_argument("--init-draft", default=None)
    return p.parse_args()


def shape_config(s, max_seq):
    n_layers, dim, heads, kv, ffn = (int(x) for x in s.split(","))
    return Config(n_vocab=vocab.N_VOCAB, dim=dim, n_layers=n_layers, n_heads=heads,
                  n_kv_heads=kv, ffn_dim=ffn, max_seq=max_seq)


class Log:
    def __init__(self, path):
        self.f = open(path, "a")

    def __call__(self, msg):
        line = "[%s] %s" % (time.strftime("%H:%M:%S"), msg)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def make_optimizer(model, lr, wd, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    if device.startswith("cuda"):
        try:
            return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def lr_factor(step, progress, warmup, min_frac):
    if step < warmup:
        return (step + 1) / warmup
    p = min(1.0, progress)
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * p))


class Batches:
    """Rows of each bucket on the device, walked in a shuffled order (reshuffled per epoch)."""

    def __init__(self, rows, device, seed):
        self.device = device
        self.lut = torch.tensor(vocab.byte_lut(), dtype=torch.long, device=device)
        self.tok = {L: torch.from_numpy(t).to(device) for L, (t, _) in rows.items()}
        self.mask = {L: torch.from_numpy(m).to(device) for L, (_, m) in rows.items()}
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        self.order = {L: torch.randperm(len(t), generator=self.gen) for L, t in self.tok.items()}
        self.cursor = {L: 0 for L in self.tok}
        self.epochs = {L: 0 for L in self.tok}

    def next(self, L, n):
        if self.cursor[L] + n > len(self.order[L]):
            self.order[L] = torch.randperm(len(self.order[L]), generator=self.gen)
            self.cursor[L] = 0
            self.epochs[L] += 1
        idx = self.order[L][self.cursor[L]:self.cursor[L] + n].to(self.device)
        self.cursor[L] += n
        ids = self.lut[self.tok[L][idx].long()]
        return ids[:, :-1], ids[:, 1:], self.mask[L][idx][:, 1:]

    def state(self):
        return {"cursor": self.cursor, "epochs": self.epochs,
                "order": {L: o.tolist() for L, o in self.order.items()}}


def weighted_loss(logits, targets, mask, prompt_weight):
    """Mean loss over answer tokens plus prompt_weight times the mean over prompt tokens: the
    answer keeps full weight however long the prompt around it is."""
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                         reduction="none").view(targets.shape)
    ans, pr = mask == 2, mask == 1
    ans_loss = (ce * ans).sum() / ans.sum().clamp(min=1)
    prompt_loss = (ce * pr).sum() / pr.sum().clamp(min=1)
    return ans_loss + prompt_weight * prompt_loss, ans_loss.detach(), prompt_loss.detach()


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    ckpt_dir = a.ckpt_dir or os.path.join(a.out, "ckpt")
    os.makedirs(ckpt_dir, exist_ok=True)
    log = Log(os.path.join(a.out, "train_log.txt"))
    log("args: " + json.dumps(vars(a)))
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    if a.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        log("device: %s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    data.check_alphabet(a.gen_bin)

    buckets = {}
    for item in a.buckets.split(","):
        L, share = item.split(":")
        buckets[int(L)] = float(share)
    max_seq = max(buckets)
    mix = dict((kv.split("=")[0], float(kv.split("=")[1])) for kv in a.mix.split(","))
    total_share = sum(buckets.values())
    bucket_rows = {L: max(64, int(a.data_tokens * s / total_share / L)) for L, s in buckets.items()}
    rows, _ = data.generate_rows(a.gen_bin, os.path.join(ckpt_dir, "rows"), bucket_rows, mix,
                                 procs=a.procs)
    batches = Batches(rows, a.device, a.seed)
    del rows

    models = {"default": Transformer(shape_config(a.default_shape, max_seq))}
    if not a.no_draft:
        models["draft"] = Transformer(shape_config(a.draft_shape, max_seq))
    inits = {"default": a.init_default, "draft": a.init_draft}
    for name, m in models.items():
        if inits.get(name):
            loaded, _ = export_gguf.load(inits[name])
            m.load_state_dict(loaded.state_dict())
            log("%s: initialised from %s" % (name, inits[name]))
        m.to(a.device)
        log("%s: %s, %.2f M parameters" % (name, json.dumps(m.cfg.to_dict()), m.n_params() / 1e6))
    lrs = {"default": a.lr, "draft": a.draft_lr}
    opts = {n: make_optimizer(m, lrs[n], a.weight_decay, a.device) for n, m in models.items()}

    step, elapsed, tokens_seen = 0, 0.0, 0
    if a.resume:
        st = torch.load(a.resume, map_location=a.device)
        for n in models:
            models[n].load_state_dict(st["models"][n])
            opts[n].load_state_dict(st["opts"][n])
        step, elapsed, tokens_seen = st["step"], st["elapsed"], st["tokens_seen"]
        log("resumed from %s at step %d (%.0f s)" % (a.resume, step, elapsed))

    def export_all(tag=""):
        for n, m in models.items():
            path = os.path.join(a.out, "%s.gguf" % n)
            export_gguf.export(m, path, "frugal-%s" % n,
                               {"frugal.training.steps": step, "frugal.training.tokens": tokens_seen})
        torch.save({"models": {n: m.state_dict() for n, m in models.items()},
                    "opts": {n: o.state_dict() for n, o in opts.items()},
                    "step": step, "elapsed": elapsed, "tokens_seen": tokens_seen,
                    "args": vars(a)}, os.path.join(ckpt_dir, "last.pt"))
        log("exported GGUF + checkpoint at step %d %s" % (step, tag))

    short = sorted(buckets)[:2]
    rng = random.Random(a.seed + step)
    metrics = []
    t_start = time.time() - elapsed
    last_export = last_probe = time.time()
    last_log, tok_since = time.time(), 0
    for m in models.values():
        m.train()
    while True:
        elapsed = time.time() - t_start
        progress = elapsed / a.time_budget
        if progress >= 1.0:
            break
        if progress < a.curriculum:
            L = rng.choice(short)
        else:
            L = rng.choices(list(buckets), weights=list(buckets.values()))[0]
        n_rows = max(1, a.tokens_per_step // L)
        x, y, mk = batches.next(L, n_rows)
        rec = {"step": step, "t": round(elapsed, 1), "L": L}
        for n, m in models.items():
            if n == "draft" and step % a.draft_every != 0:
                continue
            for g in opts[n].param_groups:
                g["lr"] = lrs[n] * lr_factor(step, progress, a.warmup_steps, a.min_lr_frac)
            with evaluate.amp(a.device):
                logits = m(x)
            loss, ans_loss, prompt_loss = weighted_loss(logits, y, mk, a.prompt_weight)
            opts[n].zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opts[n].step()
            rec[n] = (loss, ans_loss, prompt_loss, gn)
        step += 1
        tokens_seen += x.numel()
        tok_since += x.numel()
        if step % 25 == 0 or step == 1:
            now = time.time()
            parts = []
            for n in [n for n in models if n in rec]:
                l, al, pl, gn = (float(v) for v in rec[n])
                rec[n] = [round(l, 4), round(al, 4), round(pl, 4), round(gn, 3)]
                parts.append("%s loss %.4f ans %.4f prompt %.4f gn %.2f" % (n, l, al, pl, gn))
            log("step %d t %.0fs L %d lr %.2e %.2fM tok/s | %s" % (
                step, elapsed, L, opts["default"].param_groups[0]["lr"],
                tok_since / (now - last_log) / 1e6, " | ".join(parts)))
            metrics.append(rec)
            last_log, tok_since = now, 0
        if time.time() - last_probe > a.probe_every:
            try:
                evaluate.evaluate(models["default"], a.gen_bin, FAMILIES, [max_seq], 20, a.device, log=log)
            except Exception as e:  # a probe must never end the run
                log("probe eval failed: %r" % e)
            last_probe = time.time()
        if time.time() - last_export > a.export_every:
            export_all()
            last_export = time.time()
    log("training done: %d steps, %.1f M tokens, %.0f s, data epochs %s" % (
        step, tokens_seen / 1e6, elapsed, json.dumps(batches.epochs)))
    export_all("(final)")
    lengths = [int(x) for x in a.eval_lengths.split(",")]
    results = {"steps": step, "tokens": tokens_seen, "train_seconds": elapsed,
               "params": {n: m.n_params() for n, m in models.items()},
               "configs": {n: m.cfg.to_dict() for n, m in models.items()}, "eval": {}}
    for n, m in models.items():
        en = a.eval_n if n == "default" else a.draft_eval_n
        if en > 0:
            log("evaluating %s (n=%d per task and length)" % (n, en))
            try:
                results["eval"][n] = evaluate.evaluate(m, a.gen_bin, FAMILIES, lengths, en, a.device, log=log)
            except Exception as e:
                log("eval of %s failed: %r" % (n, e))
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f)
    log("all done")


if __name__ == "__main__":
    main()
