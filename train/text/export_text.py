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
    w = export_gguf.model_writer(model, name, extra_meta)
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
    export_gguf.add_tensors(w, model)
    w.write(path)
