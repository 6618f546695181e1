"""Exports a Transformer (train/model.py) as a llama-architecture GGUF with the byte-level BPE
vocabulary learned by train/text/bpe.cc (vocab.json): tokenizer.ggml.model "gpt2", pre-tokenizer
"llama-bpe", BOS <|begin_of_text|> added, EOS <|end_of_text|>. F16 matrices, F32 norms."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import export_gguf  # noqa: E402
import gguf_writer as gw  # noqa: E402

TYPE_NORMAL, TYPE_CONTROL = 1, 3


def load_vocab(path):
    with open(path, encoding="utf-8") as f:
        v = json.load(f)
    if len(v["tokens"]) != len(set(v["tokens"])):
        raise ValueError("vocab.json: duplicate token texts")
    return v


def export(model, path, name, vocab, extra_meta=None):
    c = model.cfg
    if c.n_vocab != len(vocab["tokens"]):
        raise ValueError("model has %d rows, vocabulary %d tokens" % (c.n_vocab, len(vocab["tokens"])))
    w = gw.GgufWriter()
    w.add("general.architecture", gw.T_STRING, "llama")
    w.add("general.name", gw.T_STRING, name)
    w.add("general.file_type", gw.T_U32, 1)  # mostly F16
    w.add("general.quantization_version", gw.T_U32, 2)
    for k, val in (extra_meta or {}).items():
        w.add(k, gw.T_STRING, str(val))
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
    w.add("tokenizer.ggml.model", gw.T_STRING, "gpt2")
    w.add("tokenizer.ggml.pre", gw.T_STRING, vocab["pre"])
    w.add_array("tokenizer.ggml.tokens", gw.T_STRING, vocab["tokens"])
    special = {vocab["bos"], vocab["eos"]}
    w.add_array("tokenizer.ggml.token_type", gw.T_I32,
                [TYPE_CONTROL if i in special else TYPE_NORMAL for i in range(len(vocab["tokens"]))])
    w.add_array("tokenizer.ggml.merges", gw.T_STRING, vocab["merges"])
    w.add("tokenizer.ggml.bos_token_id", gw.T_U32, vocab["bos"])
    w.add("tokenizer.ggml.eos_token_id", gw.T_U32, vocab["eos"])
    w.add("tokenizer.ggml.add_bos_token", gw.T_BOOL, True)
    w.add("tokenizer.ggml.add_eos_token", gw.T_BOOL, False)
    for gname, p in export_gguf._tensor_map(model).items():
        gtype = gw.GGML_F32 if p.dim() == 1 else gw.GGML_F16
        w.add_tensor(gname, list(reversed(p.shape)), gtype, export_gguf._bytes(p, gtype))
    w.write(path)
