#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into tests/fuzz/corpus/<target>/ (committed; run
again after editing). Seeds are small valid or near-valid inputs that reach each parser's main
paths; the fuzzer mutates from there. The input layout of each target is described at the top of
its .cc file."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- GGUF: built field by field from the format's layout (little-endian throughout).
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q",
          F64: "d"}


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gvalue(t, v):
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for x in items:
            out += gvalue(et, x)
        return out
    return struct.pack("<" + SCALAR[t], v)


def gguf(kvs, tensors=(), version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, ggml_type, dims, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gstr(key) + struct.pack("<I", t) + gvalue(t, v)
    offset = 0
    infos = b""
    for name, gt, dims, data in tensors:
        infos += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", gt, offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += infos
    out += b"\0" * ((-len(out)) % alignment)
    for _, _, _, data in tensors:
        out += data + b"\0" * ((-len(data)) % alignment)
    return out


GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
f32x8 = struct.pack("<8f", *[0.5 * i for i in range(8)])

write("gguf", "empty_v3", gguf([]))
write("gguf", "scalars_v2", gguf([("u8", U8, 7), ("i8", I8, -7), ("u16", U16, 700), ("i16", I16, -700),
                                  ("u32", U32, 70000), ("i32", I32, -70000), ("f32", F32, 1.5),
                                  ("bool", BOOL, True), ("str", STRING, "frugal"), ("u64", U64, 1 << 40),
                                  ("i64", I64, -(1 << 40)), ("f64", F64, 2.25)], version=2))
write("gguf", "arrays", gguf([("ints", ARRAY, (I32, [1, -2, 3])), ("floats", ARRAY, (F32, [0.5, 1.5])),
                              ("strs", ARRAY, (STRING, ["a", "", "ccc"])), ("bools", ARRAY, (BOOL, [True, False]))]))
write("gguf", "tensors_align64", gguf([("general.architecture", STRING, "llama"), ("general.alignment", U32, 64)],
                                      [("a.weight", GGML_F32, [4, 2], f32x8),
                                       ("b.weight", GGML_F16, [8], b"\x00\x3c" * 8),
                                       ("c.weight", GGML_Q8_0, [32], b"\x00\x3c" + bytes(range(32)))],
                                      alignment=64))
spm_tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + ["\u2581a", "\u2581b", "ab", "\u2581"]
write("gguf", "spm_vocab", gguf([("general.architecture", STRING, "llama"),
                                 ("tokenizer.ggml.model", STRING, "llama"),
                                 ("tokenizer.ggml.tokens", ARRAY, (STRING, spm_tokens)),
                                 ("tokenizer.ggml.scores", ARRAY, (F32, [0.0] * 259 + [-1.0, -2.0, -3.0, -4.0])),
                                 ("tokenizer.ggml.token_type", ARRAY, (I32, [2, 3, 3] + [6] * 256 + [1] * 4)),
                                 ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
                                 ("tokenizer.ggml.add_bos_token", BOOL, True)],
                                [("token_embd.weight", GGML_F32, [2, 4], f32x8)]))
# Byte-level BPE: GPT-2's printable characters for the bytes, a couple of merges, one special token.
bpe_bytes = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["\u0120"]
write("gguf", "bpe_vocab", gguf([("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "qwen2"),
                                 ("tokenizer.ggml.tokens", ARRAY, (STRING, bpe_bytes + ["he", "\u0120he", "<|im_end|>"])),
                                 ("tokenizer.ggml.token_type", ARRAY, (I32, [1] * (len(bpe_bytes) + 2) + [3])),
                                 ("tokenizer.ggml.merges", ARRAY, (STRING, ["h e", "\u0120 he"])),
                                 ("tokenizer.ggml.eos_token_id", U32, len(bpe_bytes) + 2)]))

# --- Tokenizers: byte 0 = options (bit 0 add_special, bit 1 parse_special), then the text.
texts = {
    "plain": (0, "Hello world, this is frugal."),
    "bos": (1, "Once upon a time there was a little girl."),
    "unicode": (0, "h\u00e9llo \u4e16\u754c \U0001F642 \u2581x"),
    "spaces": (0, "  \t\n\n  x  y   \r\n"),
    "numbers": (0, "12345 3.14159 1,000,000"),
    "contractions": (0, "I'm sure you'll see they've done it, don't you?"),
    "special_qwen": (3, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
    "special_spm": (3, "<s>test</s><unk> text"),
}
for target in ("tokenize_spm", "tokenize_bpe"):
    for name, (flags, text) in texts.items():
        write(target, name, bytes([flags]) + text.encode())

# --- Chat templates: byte 0 = kind, byte 1 bit 0 = generation prompt, then NUL-separated template
# text, role, content, role, content, ...
def chat(kind, gen, template, *turns):
    return bytes([kind, gen]) + "\0".join((template,) + turns).encode()


write("chat_template", "chatml", chat(0, 1, "{{'<|im_start|>' + message['role']}}", "system", "be brief", "user", "hi"))
write("chat_template", "llama2_sys", chat(1, 0, "[INST] <<SYS>>", "system", "sys", "user", "q", "assistant", "a",
                                          "user", "q2"))
write("chat_template", "llama3", chat(2, 1, "<|start_header_id|>", "user", "hello"))
write("chat_template", "mistral_v7", chat(10, 0, "[SYSTEM_PROMPT]", "system", "s", "user", "u"))
write("chat_template", "zephyr_name", chat(4, 1, "zephyr", "user", "  padded  "))
write("chat_template", "unsupported", chat(6, 0, "<start_of_turn>", "tool", "x"))

# --- JSON schema: the schema on the first line, the generated text after it.
schemas = {
    "object": ({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                                 "age": {"type": "integer"}}, "required": ["name"]},
               '{"name": "Ann", "age": 42}'),
    "array": ({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3}, "[1.5, -2e3, 0]"),
    "enum": ({"enum": ["red", "green", 3, None]}, '"green"'),
    "anyof": ({"anyOf": [{"type": "boolean"}, {"type": "null"}, {"const": {"k": [1]}}]}, '{"k":[1]}'),
    "types": ({"type": ["string", "integer"], "minLength": 2}, '"\\u00e9\\n\\"q"'),
    "any_object": ({"type": "object"}, '{"a": {"b": [true, false, null, "s", 1.0e-5]}}'),
    "refused": ({"$ref": "#/defs/x"}, "{}"),
    # A number whose exponent overflows a double: valid grammar that parsers refuse.
    "overflow": ({"type": "object"}, '{"a": 777e427, "b": 1e99, "c": 5e-999}'),
}
for name, (schema, text) in schemas.items():
    write("json_schema", name, json.dumps(schema) + "\n" + text)

# --- API codecs: byte 0 = endpoint (see the target), then the JSON body.
def body(endpoint, obj):
    return bytes([endpoint]) + json.dumps(obj).encode()


write("openai", "chat", body(0, {"model": "tiny", "messages": [{"role": "system", "content": "be brief"},
                                                               {"role": "user", "content": "hi"}],
                                 "max_tokens": 8, "temperature": 0.5, "stop": ["\n"], "seed": 3}))
write("openai", "chat_parts", body(0, {"model": "tiny", "messages": [
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
    "stream": True, "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2}))
write("openai", "chat_schema", body(0, {"model": "tiny", "messages": [{"role": "user", "content": "json"}],
                                        "response_format": {"type": "json_schema", "json_schema": {
                                            "name": "x", "schema": {"type": "object",
                                                                    "properties": {"a": {"type": "integer"}}}}}}))
write("openai", "completion", body(1, {"model": "tiny", "prompt": "Once upon", "n": 2, "top_p": 0.9,
                                       "logprobs": 1, "max_tokens": 4}))
write("openai", "completion_ids", body(1, {"model": "tiny", "prompt": [[1, 2, 3], "text"], "echo": False}))
write("anthropic", "messages", body(0, {"model": "tiny", "max_tokens": 16, "system": "sys",
                                        "messages": [{"role": "user", "content": "hi"},
                                                     {"role": "assistant", "content": "hello"},
                                                     {"role": "user", "content": [{"type": "text", "text": "more"}]}],
                                        "stop_sequences": ["END"], "top_k": 5, "stream": True}))
write("anthropic", "system_blocks", body(0, {"model": "tiny", "max_tokens": 1,
                                             "system": [{"type": "text", "text": "s"}],
                                             "messages": [{"role": "user", "content": "x"}], "temperature": 1}))
write("ollama", "generate", body(0, {"model": "tiny", "prompt": "Why?", "stream": False, "raw": False,
                                     "options": {"num_predict": 8, "temperature": 0.2, "seed": 1, "stop": ["."]}}))
write("ollama", "generate_format", body(0, {"model": "tiny:latest", "prompt": "j", "format": "json"}))
write("ollama", "chat", body(1, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                 "format": {"type": "object", "properties": {"a": {"type": "string"}}},
                                 "options": {"top_k": 3, "repeat_penalty": 1.1}}))
write("ollama", "load_only", body(0, {"model": "tiny"}))
