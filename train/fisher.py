"""The empirical Fisher diagonal of a llama GGUF model on calibration text, for FAMPWQ
(`frugal quantize --target-bpw B --fisher FILE`, docs/quantization.md).

    build/bin/frugal tokenize -m MODEL.gguf -f calib.txt > calib.tokens.json
    python3 train/fisher.py -m MODEL.gguf --tokens calib.tokens.json -c 128 -o fisher.gguf

The token ids come from frugal's own tokenizer (one JSON array, BOS first). They are cut into
non-overlapping windows of -c tokens; the first token of every window is set to BOS, as
`frugal perplexity` starts its chunks. For each window w the loss L_w is the mean cross-entropy
of predicting tokens 1..c-1 from their prefixes, and the file holds, for every weight theta_i,

    F_i = (1/W) * sum_w (dL_w / dtheta_i)^2

the mean over the W windows of the squared gradient of the window's mean token loss: the
"empirical Fisher" diagonal with one gradient per window (not per token; a per-token version
would need one backward pass per token). Only ratios between weights matter to the allocator.

The output is a GGUF with one F32 tensor per quantizable weight (every matrix: token_embd,
output and the block matrices), named and shaped exactly like the model's tensor, and the
metadata fisher.model, fisher.windows, fisher.tokens (tokens whose loss was differentiated),
fisher.context, fisher.expectation.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_gguf  # noqa: E402
import gguf_writer as gw  # noqa: E402


def windows_of(tokens, ctx, bos, limit):
    out = []
    for start in range(0, len(tokens) - ctx + 1, ctx):
        w = list(tokens[start:start + ctx])
        w[0] = bos
        out.append(w)
        if limit and len(out) == limit:
            break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="F16/F32 llama GGUF")
    ap.add_argument("--tokens", required=True, help="JSON array of token ids (frugal tokenize -m MODEL -f TEXT)")
    ap.add_argument("-c", "--ctx", type=int, default=128, help="tokens per window")
    ap.add_argument("--windows", type=int, default=0, help="use at most this many windows (0: all)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, meta = export_gguf.load(a.model)
    model.eval()  # no dropout exists, but be explicit: the gradients of the inference model
    with open(a.tokens) as f:
        tokens = json.load(f)
    bos = int(meta.get("tokenizer.ggml.bos_token_id", tokens[0]))
    wins = windows_of(tokens, a.ctx, bos, a.windows)
    if not wins:
        sys.exit("fisher.py: %d tokens make no window of %d" % (len(tokens), a.ctx))
    names = {p: n for n, p in export_gguf._tensor_map(model).items()}
    matrices = [(names[p], p) for p in model.parameters() if p.dim() == 2]
    fisher = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in matrices}
    t0 = time.time()
    total_loss = 0.0
    for i, w in enumerate(wins):
        x = torch.tensor([w], dtype=torch.long)
        model.zero_grad(set_to_none=True)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), x[:, 1:].reshape(-1))
        loss.backward()
        total_loss += loss.item()
        for n, p in matrices:
            fisher[n] += p.grad.double() ** 2
        if (i + 1) % 20 == 0 or i + 1 == len(wins):
            print("fisher.py: %d/%d windows, mean loss %.4f, %.1f s" % (i + 1, len(wins), total_loss / (i + 1),
                                                                       time.time() - t0), file=sys.stderr)
    w = gw.GgufWriter()
    w.add("general.architecture", gw.T_STRING, "fisher")
    w.add("fisher.model", gw.T_STRING, os.path.basename(a.model))
    w.add("fisher.windows", gw.T_U32, len(wins))
    w.add("fisher.tokens", gw.T_U32, len(wins) * (a.ctx - 1))
    w.add("fisher.context", gw.T_U32, a.ctx)
    w.add("fisher.expectation", gw.T_STRING, "mean over windows of the squared gradient of the window's mean token loss")
    w.add("fisher.mean_loss", gw.T_F32, total_loss / len(wins))
    for n, _ in sorted(matrices):
        v = (fisher[n] / len(wins)).float().contiguous()
        w.add_tensor(n, list(reversed(v.shape)), gw.GGML_F32, v.numpy().tobytes())
    w.write(a.output)
    print("fisher.py: %s: %d tensors, %d windows of %d tokens, mean loss %.4f" % (a.output, len(matrices), len(wins),
                                                                                a.ctx, total_loss / len(wins)),
          file=sys.stderr)


if __name__ == "__main__":
    main()
