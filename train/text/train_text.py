"""Trains the natural-text model (and a small draft beside it, on the same batches) on the token
files written by `bpe encode`, for a fixed wall-clock budget, and exports both as GGUF.

  python3 train/text/train_text.py --data DIR --out OUT --time-budget 420

DIR holds train.bin and heldout.bin (uint16 ids, documents as BOS ... EOS) and vocab.json. Each
step takes random windows of --ctx tokens from the training stream. The learning rate warms up,
then follows a cosine over the fraction of the time budget spent, so the run ends on schedule.
Held-out loss is measured on fixed windows of the held-out stream (no overlap with training text:
the split is by document). OUT gets text.gguf, text-draft.gguf, train_log.txt, results.json.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, here)
import export_text  # noqa: E402
from model import Config, Transformer  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--time-budget", type=float, default=420, help="training seconds")
    p.add_argument("--shape", default="6,512,8,2,1536", help="layers,dim,heads,kv_heads,ffn")
    p.add_argument("--draft-shape", default="2,128,2,1,384")
    p.add_argument("--no-draft", action="store_true")
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--rows", type=int, default=64, help="windows per step")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--draft-lr", type=float, default=3e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.05)
    p.add_argument("--warmup-steps", type=int, default=150)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eval-windows", type=int, default=256)
    p.add_argument("--eval-every", type=float, default=60)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--compile", action="store_true")
    return p.parse_args()


class Log:
    def __init__(self, path):
        self.f = open(path, "a")

    def __call__(self, msg):
        line = "[%s] %s" % (time.strftime("%H:%M:%S"), msg)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def config(shape, n_vocab, ctx):
    n_layers, dim, heads, kv, ffn = (int(x) for x in shape.split(","))
    return Config(n_vocab=n_vocab, dim=dim, n_layers=n_layers, n_heads=heads, n_kv_heads=kv,
                  ffn_dim=ffn, max_seq=ctx)


def optimizer(model, lr, wd, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]
    kw = {"fused": True} if device.startswith("cuda") else {}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **kw)


def lr_factor(step, progress, warmup, min_frac):
    if step < warmup:
        return (step + 1) / warmup
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def amp(device):
    if device.startswith("cuda"):
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    import contextlib
    return contextlib.nullcontext()


@torch.no_grad()
def heldout_loss(model, windows, device, batch=32):
    model.eval()
    total, n = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(device)
        with amp(device):
            logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                               reduction="sum")
        total += float(loss)
        n += w[:, 1:].numel()
    model.train()
    return total / n


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    log = Log(os.path.join(a.out, "train_log.txt"))
    log("args: " + json.dumps(vars(a)))
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    if a.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        log("device: %s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    vocab = export_text.load_vocab(os.path.join(a.data, "vocab.json"))
    n_vocab = len(vocab["tokens"])
    train = np.fromfile(os.path.join(a.data, "train.bin"), dtype=np.uint16)
    held = np.fromfile(os.path.join(a.data, "heldout.bin"), dtype=np.uint16)
    log("tokens: train %d, held-out %d, vocabulary %d" % (len(train), len(held), n_vocab))
    if int(train.max()) >= n_vocab or int(held.max()) >= n_vocab:
        raise SystemExit("token ids exceed the vocabulary")
    train_t = torch.from_numpy(train.astype(np.int64)).to(a.device)
    L = a.ctx + 1
    n_eval = min(a.eval_windows, len(held) // L)
    eval_windows = torch.from_numpy(held[:n_eval * L].astype(np.int64)).view(n_eval, L)

    models = {"text": Transformer(config(a.shape, n_vocab, a.ctx))}
    if not a.no_draft:
        models["text-draft"] = Transformer(config(a.draft_shape, n_vocab, a.ctx))
    lrs = {"text": a.lr, "text-draft": a.draft_lr}
    for n, m in models.items():
        m.to(a.device)
        log("%s: %s, %.2f M parameters" % (n, json.dumps(m.cfg.to_dict()), m.n_params() / 1e6))
    opts = {n: optimizer(m, lrs[n], a.weight_decay, a.device) for n, m in models.items()}
    fwd = {n: (torch.compile(m) if a.compile else m) for n, m in models.items()}
    offsets = torch.arange(L, device=a.device)

    step, tokens_seen, history = 0, 0, []
    best = {n: (float("inf"), None, 0) for n in models}  # held-out loss, weights, step
    t0 = time.time()
    last_eval, last_log, tok_since = t0, t0, 0
    while True:
        elapsed = time.time() - t0
        progress = elapsed / a.time_budget
        if progress >= 1.0:
            break
        starts = torch.from_numpy(rng.integers(0, len(train) - L, size=a.rows)).to(a.device)
        batch = train_t[starts[:, None] + offsets[None, :]]
        x, y = batch[:, :-1], batch[:, 1:]
        losses = {}
        for n, m in models.items():
            for g in opts[n].param_groups:
                g["lr"] = lrs[n] * lr_factor(step, progress, a.warmup_steps, a.min_lr_frac)
            with amp(a.device):
                logits = fwd[n](x)
            loss = F.cross_entropy(logits.float().reshape(-1, n_vocab), y.reshape(-1))
            opts[n].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opts[n].step()
            losses[n] = loss.detach()
        step += 1
        tokens_seen += x.numel()
        tok_since += x.numel()
        if step % 50 == 0 or step == 1:
            now = time.time()
            log("step %d t %.0fs lr %.2e %.2fM tok/s | %s" % (
                step, elapsed, opts["text"].param_groups[0]["lr"], tok_since / (now - last_log) / 1e6,
                " | ".join("%s %.4f" % (n, float(v)) for n, v in losses.items())))
            last_log, tok_since = now, 0
        if time.time() - last_eval > a.eval_every:
            rec = {"step": step, "t": round(elapsed, 1), "tokens": tokens_seen}
            for n, m in models.items():
                rec[n] = heldout_loss(m, eval_windows, a.device)
                if rec[n] < best[n][0]:  # many epochs over a small corpus: keep the best weights
                    best[n] = (rec[n], {k: v.detach().clone() for k, v in m.state_dict().items()}, step)
            history.append(rec)
            log("held-out loss: " + json.dumps(rec))
            last_eval = time.time()
    log("training done: %d steps, %.1f M tokens (%.2f epochs), %.0f s" % (
        step, tokens_seen / 1e6, tokens_seen / len(train), time.time() - t0))
    results = {"steps": step, "tokens": tokens_seen, "epochs": tokens_seen / len(train),
               "train_seconds": time.time() - t0, "train_tokens": len(train),
               "heldout_tokens": len(held), "history": history, "models": {}}
    for n, m in models.items():
        hl = heldout_loss(m, eval_windows, a.device)
        chosen = step
        if best[n][0] < hl:
            m.load_state_dict(best[n][1])
            hl, chosen = best[n][0], best[n][2]
            log("%s: the weights of step %d had the lowest held-out loss; exporting those" % (n, chosen))
        results["models"][n] = {"exported_step": chosen,"config": m.cfg.to_dict(), "params": m.n_params(),
                                "final_train_loss": float(losses[n]), "heldout_loss": hl,
                                "heldout_ppl": math.exp(hl), "heldout_windows": n_eval}
        export_text.export(m, os.path.join(a.out, n + ".gguf"), "frugal-" + n, vocab,
                           {"frugal.training.steps": chosen, "frugal.training.tokens": tokens_seen,
                            "frugal.training.seed": a.seed})
        log("%s: held-out loss %.4f (ppl %.3f over %d windows of %d); exported" % (
            n, hl, math.exp(hl), n_eval, a.ctx))
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    log("all done")


if __name__ == "__main__":
    main()
