"""Exports a Transformer (model.py) as a llama-architecture GGUF (F16 matrices, F32 norms) with the
character-level SPM vocabulary of vocab.py, and loads such a file back into a Transformer."""
import struct

import torch

import gguf_writer as gw
import vocab
from model import Config, Transformer


def _tensor_map(model):
    """GGUF name -> PyTorch parameter ([out, in] matrices become ggml dims [in, out])."""
    m = {"token_embd.weight": model.tok_emb.weight,
         "output_norm.weight": model.norm.weight,
         "output.weight": model.out.weight}
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        m[p + "attn_norm.weight"] = b.attn_norm.weight
        m[p + "attn_q.weight"] = b.attn.wq.weight
        m[p + "attn_k.weight"] = b.attn.wk.weight
        m[p + "attn_v.weight"] = b.attn.wv.weight
        m[p + "attn_output.weight"] = b.attn.wo.weight
        m[p + "ffn_norm.weight"] = b.ffn_norm.weight
        m[p + "ffn_gate.weight"] = b.w_gate.weight
        m[p + "ffn_up.weight"] = b.w_up.weight
        m[p + "ffn_down.weight"] = b.w_down.weight
    return m


def _bytes(t, ggml_type):
    t = t.detach().float().cpu().contiguous()
    if ggml_type == gw.GGML_F16:
        t = t.half()
    return t.numpy().tobytes()


def model_writer(model, name, extra_meta=None):
    """A GgufWriter holding the llama architecture metadata of `model` (no tokenizer, no tensors)."""
    c = model.cfg
    w = gw.GgufWriter()
    w.add("general.architecture", gw.T_STRING, "llama")
    w.add("general.name", gw.T_STRING, name)
    w.add("general.file_type", gw.T_U32, 1)  # mostly F16
    w.add("general.quantization_version", gw.T_U32, 2)
    for k, v in (extra_meta or {}).items():
        w.add(k, gw.T_STRING, str(v))
    w.add("llama.context_length", gw.T_U32, c.max_seq)
    w.add("llama.embedding_length", gw.T_U32, c.dim)
    w.add("llama.block_count", gw.T_U32, c.n_layers)
    w.add("llama.feed_forward_length", gw.T_U32, c.ffn_dim)
    w.add("llama.attention.head_count", gw.T_U32, c.n_heads)
    w.add("llama.attention.head_count_kv", gw.T_U32, c.n_kv_heads)
    w.add("llama.attention.layer_norm_rms_epsilon", gw.T_F32, c.norm_eps)
    w.add("llama.rope.dimension_count", gw.T_U32, c.head_dim)
    w.add("llama.rope.freq_base", gw.T_F32, c.rope_base)
    w.add("llama.vocab_size", gw.T_U32, c.n_vocab)
    return w


def add_tensors(w, model):
    """F16 matrices, F32 norms, in _tensor_map's order."""
    for gname, p in _tensor_map(model).items():
        gtype = gw.GGML_F32 if p.dim() == 1 else gw.GGML_F16
        w.add_tensor(gname, list(reversed(p.shape)), gtype, _bytes(p, gtype))


def export(model, path, name, extra_meta=None):
    w = model_writer(model, name, extra_meta)
    w.add("tokenizer.ggml.model", gw.T_STRING, "llama")
    w.add_array("tokenizer.ggml.tokens", gw.T_STRING, vocab.token_texts())
    w.add_array("tokenizer.ggml.scores", gw.T_F32, vocab.token_scores())
    w.add_array("tokenizer.ggml.token_type", gw.T_I32, vocab.token_types())
    w.add("tokenizer.ggml.bos_token_id", gw.T_U32, vocab.BOS)
    w.add("tokenizer.ggml.eos_token_id", gw.T_U32, vocab.EOS)
    w.add("tokenizer.ggml.unknown_token_id", gw.T_U32, vocab.UNK)
    w.add("tokenizer.ggml.add_bos_token", gw.T_BOOL, True)
    w.add("tokenizer.ggml.add_eos_token", gw.T_BOOL, False)
    w.add("tokenizer.ggml.add_space_prefix", gw.T_BOOL, False)
    add_tensors(w, model)
    w.write(path)


def load(path, device="cpu"):
    """Builds a Transformer from a llama GGUF with F16/F32 tensors (this module's files, or any
    with the same tensors): the vocabulary size is the length of the file's token list, so a BPE
    vocabulary loads as well as the character one."""
    meta, tensors = gw.read_gguf(path)
    g = lambda k, default=None: meta.get("llama." + k, default)
    n_heads = g("attention.head_count")
    cfg = Config(n_vocab=len(meta["tokenizer.ggml.tokens"]), dim=g("embedding_length"),
                 n_layers=g("block_count"), n_heads=n_heads,
                 n_kv_heads=g("attention.head_count_kv", n_heads), ffn_dim=g("feed_forward_length"),
                 norm_eps=g("attention.layer_norm_rms_epsilon", 1e-5), rope_base=g("rope.freq_base", 10000.0),
                 max_seq=g("context_length", 2048))
    if tensors["token_embd.weight"][0][1] != cfg.n_vocab:
        raise ValueError("%s: token_embd has %d rows, the token list %d entries"
                         % (path, tensors["token_embd.weight"][0][1], cfg.n_vocab))
    model = Transformer(cfg)
    with torch.no_grad():
        for gname, p in _tensor_map(model).items():
            dims, gtype, data = tensors[gname]
            dt = torch.float16 if gtype == gw.GGML_F16 else torch.float32
            t = torch.frombuffer(bytearray(data), dtype=dt).float().view(*reversed(dims))
            p.copy_(t)
    return model.to(device), meta
