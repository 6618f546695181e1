"""A Llama-architecture decoder as llama.cpp's "llama" GGUF architecture runs it.

RMSNorm, rotary embeddings on ADJACENT pairs (x[2i], x[2i+1]) with angle pos * base^(-2i/d) (the
layout llama.cpp uses for arch llama, so weights export without the Q/K row permutation that HF
checkpoints need), grouped-query attention (query head h reads KV head h // (n_heads/n_kv_heads)),
SwiGLU MLP, untied output projection.
"""
from dataclasses import asdict, dataclass
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int
    dim: int = 384
    n_layers: int = 6
    n_heads: int = 6
    n_kv_heads: int = 2
    ffn_dim: int = 768
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    max_seq: int = 2048

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope_tables(head_dim, positions, base):
    """cos, sin of shape [len(positions), head_dim/2] for pair i: angle = pos * base^(-2i/head_dim)."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim)
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """x: [B, T, H, D]; cos/sin: [T, D/2] or [B, T, D/2]. Rotates adjacent pairs."""
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xf[..., 0], xf[..., 1]
    if cos.dim() == 2:
        c, s = cos[None, :, None, :], sin[None, :, None, :]
    else:
        c, s = cos[:, :, None, :], sin[:, :, None, :]
    y = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return y.reshape(x.shape).to(x.dtype)


def sdpa(q, k, v, causal, mask=None):
    """Scaled dot-product attention, 1/sqrt(d) scale; `mask` is boolean (True = attend)."""
    if hasattr(F, "scaled_dot_product_attention"):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    # Older PyTorch (CPU checks only).
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        T, S = s.shape[-2], s.shape[-1]
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)

    def forward(self, x, cos, sin, cache=None, cache_pos=None, attn_mask=None):
        B, T, _ = x.shape
        c = self.cfg
        q = self.wq(x).view(B, T, c.n_heads, c.head_dim)
        k = self.wk(x).view(B, T, c.n_kv_heads, c.head_dim)
        v = self.wv(x).view(B, T, c.n_kv_heads, c.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        if cache is not None:
            # Decode: write this step's K/V at each row's own position, attend over the cache.
            kc, vc = cache
            rows = torch.arange(B, device=x.device)
            kc[rows, :, cache_pos] = k[:, :, 0]
            vc[rows, :, cache_pos] = v[:, :, 0]
            k, v = kc, vc
        group = c.n_heads // c.n_kv_heads
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        o = sdpa(q, k, v, causal=attn_mask is None, mask=attn_mask)
        return self.wo(o.transpose(1, 2).reshape(B, T, -1)), (q, k, v)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_down = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin, **kw):
        a, _ = self.attn(self.attn_norm(x), cos, sin, **kw)
        x = x + a
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.n_vocab, cfg.dim)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.out = nn.Linear(cfg.dim, cfg.n_vocab, bias=False)
        self.apply(self._init)
        for b in self.blocks:  # residual projections scaled down with depth (GPT-2)
            nn.init.normal_(b.attn.wo.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))
            nn.init.normal_(b.w_down.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens):
        """Training/prefill: tokens [B, T] starting at position 0 -> logits [B, T, V]."""
        T = tokens.shape[1]
        pos = torch.arange(T, device=tokens.device)
        cos, sin = rope_tables(self.cfg.head_dim, pos, self.cfg.rope_base)
        x = self.tok_emb(tokens)
        for b in self.blocks:
            x = b(x, cos, sin)
        return self.out(self.norm(x))

    # ---- cached greedy decoding for evaluation ----
    def prefill_cache(self, tokens, cache_len):
        """Runs the (right-padded) prompts and returns logits plus K/V caches of cache_len slots."""
        B, T = tokens.shape
        c = self.cfg
        pos = torch.arange(T, device=tokens.device)
        cos, sin = rope_tables(c.head_dim, pos, c.rope_base)
        x = self.tok_emb(tokens)
        caches = []
        for b in self.blocks:
            h = b.attn_norm(x)
            k = apply_rope(b.attn.wk(h).view(B, T, c.n_kv_heads, c.head_dim), cos, sin)
            v = b.attn.wv(h).view(B, T, c.n_kv_heads, c.head_dim)
            kc = torch.zeros(B, c.n_kv_heads, cache_len, c.head_dim, dtype=k.dtype, device=k.device)
            vc = torch.zeros_like(kc)
            kc[:, :, :T] = k.transpose(1, 2)
            vc[:, :, :T] = v.transpose(1, 2)
            caches.append((kc, vc))
            x = b(x, cos, sin)
        return self.out(self.norm(x)), caches

    def decode_step(self, tok, pos, caches):
        """tok [B] at positions pos [B] (each row its own) -> logits [B, V]; writes the caches."""
        c = self.cfg
        cos, sin = rope_tables(c.head_dim, pos, c.rope_base)  # [B, D/2]
        cos, sin = cos[:, None, :], sin[:, None, :]
        L = caches[0][0].shape[2]
        mask = (torch.arange(L, device=tok.device)[None, :] <= pos[:, None])[:, None, None, :]
        x = self.tok_emb(tok[:, None])
        for b, cache in zip(self.blocks, caches):
            x = b(x, cos, sin, cache=cache, cache_pos=pos, attn_mask=mask)
        return self.out(self.norm(x))[:, 0]
