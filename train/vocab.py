"""The character-level SPM vocabulary of the project's own models.

Token ids (frozen; the GGUF files carry the same list):
    0 <unk>, 1 <s> (BOS), 2 </s> (EOS), 3..258 byte tokens <0x00>..<0xFF>,
    259.. the task alphabet (src/frugal/eval/vocab.h), space written as U+2581.
No token is longer than one character, so SentencePiece-style merging (llama.cpp's "llama"
tokenizer) can never join two characters: every character of the alphabet is exactly one token and
anything else falls back to its UTF-8 bytes.
"""

# Must equal kTaskAlphabet in src/frugal/eval/vocab.h (train.py checks it against gen_data).
ALPHABET = "\n 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,:;=+-*?!()'\"/#>_"

UNK, BOS, EOS = 0, 1, 2
BYTE_BASE = 3
CHAR_BASE = BYTE_BASE + 256
N_VOCAB = CHAR_BASE + len(ALPHABET)

# llama.cpp token types.
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6


def token_texts():
    toks = ["<unk>", "<s>", "</s>"]
    toks += ["<0x%02X>" % b for b in range(256)]
    toks += ["\u2581" if c == " " else c for c in ALPHABET]
    return toks


def token_types():
    return [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL] + [TYPE_BYTE] * 256 + [TYPE_NORMAL] * len(ALPHABET)


def token_scores():
    # Only single characters exist, so scores never decide a merge; keep them distinct anyway.
    return [0.0] * CHAR_BASE + [-float(i) for i in range(len(ALPHABET))]


def byte_lut():
    """Maps the bytes of gen_data's row files to token ids: 0 padding (masked), 1 BOS, 2 EOS."""
    lut = [UNK] * 256
    lut[1], lut[2] = BOS, EOS
    for i, c in enumerate(ALPHABET):
        lut[ord(c)] = CHAR_BASE + i
    return lut


def encode(text, bos=True):
    ids = [BOS] if bos else []
    for ch in text:
        i = ALPHABET.find(ch)
        if i >= 0:
            ids.append(CHAR_BASE + i)
        else:
            ids.extend(BYTE_BASE + b for b in ch.encode("utf-8"))
    return ids


def decode(ids):
    out = bytearray()
    for t in ids:
        if t >= CHAR_BASE:
            out += ALPHABET[t - CHAR_BASE].encode()
        elif t >= BYTE_BASE:
            out.append(t - BYTE_BASE)
    return out.decode("utf-8", errors="replace")
