"""Bits per weight of a GGUF's layer matrices (blk.N.*, two or more dims: what FAMPWQ's
--target-bpw budgets) and of the whole file's tensors, from the tensor table alone.

usage: python3 bench/layer_bpw.py FILE.gguf [...]   ->  FILE  layer_bpw  layer_bytes  tensor_bytes  types
"""
import struct
import sys

# ggml type id -> (name, elements per block, bytes per block)
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
         7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
         12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 20: ("IQ4_NL", 32, 18),
         30: ("BF16", 1, 2), 39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36),
         1024: ("HBQ_A", 128, 70), 1025: ("HBQ_E", 128, 67)}  # 1024 and up: frugal's own ids
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def tensors(path):
    with open(path, "rb") as f:
        buf = f.read(1 << 24)
    pos = 4
    _, n_t, n_kv = struct.unpack_from("<IQQ", buf, pos)
    pos += 20

    def string():
        nonlocal pos
        n = struct.unpack_from("<Q", buf, pos)[0]
        pos += 8 + n
        return buf[pos - n:pos].decode("utf-8", "replace")

    def skip(t):
        nonlocal pos
        if t == 8:
            string()
        elif t == 9:
            et, n = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            for _ in range(n):
                skip(et)
        else:
            pos += struct.calcsize(SCALAR[t])

    for _ in range(n_kv):
        string()
        t = struct.unpack_from("<I", buf, pos)[0]
        pos += 4
        skip(t)
    out = []
    for _ in range(n_t):
        name = string()
        nd = struct.unpack_from("<I", buf, pos)[0]
        pos += 4
        dims = struct.unpack_from("<%dQ" % nd, buf, pos)
        pos += 8 * nd
        gtype = struct.unpack_from("<I", buf, pos)[0]
        pos += 12
        out.append((name, dims, gtype))
    return out


for path in sys.argv[1:]:
    lw = lb = tb = 0
    kinds = {}
    for name, dims, gtype in tensors(path):
        tname, bs, bb = TYPES[gtype]
        n = 1
        for d in dims:
            n *= d
        b = n // bs * bb
        tb += b
        if name.startswith("blk.") and len(dims) >= 2:
            lw += n
            lb += b
            kinds[tname] = kinds.get(tname, 0) + 1
    print("%s %.4f %d %d %s" % (path, 8.0 * lb / lw, lb, tb, ",".join("%s:%d" % kv for kv in sorted(kinds.items()))))
