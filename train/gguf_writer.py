"""A minimal GGUF v3 writer (no dependencies beyond the standard library).

Layout (little-endian): magic "GGUF", u32 version 3, u64 tensor count, u64 metadata count; each
metadata entry as key string, u32 value type, value; each tensor as name string, u32 n_dims, u64
dims (ggml order: dims[0] is the contiguous axis), u32 ggml type, u64 offset into the data section;
zero padding to the alignment (32); tensor data, each tensor starting at a multiple of 32.
Strings are u64 length + UTF-8 bytes; arrays are u32 element type + u64 count + elements.
"""
import struct

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# Metadata value types.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)
_SCALAR_FMT = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
               T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}

# ggml tensor types used here, with bytes per element.
GGML_F32, GGML_F16 = 0, 1
_TYPE_SIZE = {GGML_F32: 4, GGML_F16: 2}


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _align(n):
    return n + (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


class GgufWriter:
    def __init__(self):
        self.kv = []       # (key, type, value, elem_type)
        self.tensors = []  # (name, dims, ggml_type, bytes)

    def add(self, key, vtype, value):
        if any(k == key for k, *_ in self.kv):
            raise ValueError("duplicate GGUF key " + key)
        self.kv.append((key, vtype, value, None))

    def add_array(self, key, elem_type, values):
        if any(k == key for k, *_ in self.kv):
            raise ValueError("duplicate GGUF key " + key)
        self.kv.append((key, T_ARRAY, list(values), elem_type))

    def add_tensor(self, name, dims, ggml_type, data):
        """dims in ggml order (reverse of a row-major array's shape); data = raw little-endian bytes."""
        n = 1
        for d in dims:
            n *= d
        if len(data) != n * _TYPE_SIZE[ggml_type]:
            raise ValueError("tensor %s: %d bytes for dims %s" % (name, len(data), dims))
        if any(t[0] == name for t in self.tensors):
            raise ValueError("duplicate tensor " + name)
        self.tensors.append((name, list(dims), ggml_type, bytes(data)))

    @staticmethod
    def _value(vtype, value):
        if vtype == T_STRING:
            return _string(value)
        return struct.pack(_SCALAR_FMT[vtype], value)

    def to_bytes(self):
        out = bytearray()
        out += GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for key, vtype, value, elem in self.kv:
            out += _string(key) + struct.pack("<I", vtype)
            if vtype == T_ARRAY:
                out += struct.pack("<IQ", elem, len(value))
                for v in value:
                    out += self._value(elem, v)
            else:
                out += self._value(vtype, value)
        offset = 0
        for name, dims, gtype, data in self.tensors:
            out += _string(name) + struct.pack("<I", len(dims))
            for d in dims:
                out += struct.pack("<Q", d)
            out += struct.pack("<IQ", gtype, offset)
            offset = _align(offset + len(data))
        out += b"\0" * (_align(len(out)) - len(out))
        for _, _, _, data in self.tensors:
            out += data
            out += b"\0" * (_align(len(data)) - len(data))
        return bytes(out)

    def write(self, path):
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self.to_bytes())
        import os
        os.replace(tmp, path)


def read_gguf(path):
    """Reads back what GgufWriter writes (and ordinary F32/F16 GGUF files): (metadata, tensors)
    with tensors as name -> (dims, ggml_type, bytes)."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        return string() if t == T_STRING else take(_SCALAR_FMT[t])

    if buf[:4] != GGUF_MAGIC:
        raise ValueError(path + ": not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    alignment = ALIGNMENT
    meta = {}
    for _ in range(n_kv):
        key = string()
        t = take("<I")
        if t == T_ARRAY:
            et, n = take("<IQ")
            meta[key] = [value(et) for _ in range(n)]
        else:
            meta[key] = value(t)
        if key == "general.alignment":
            alignment = meta[key]
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        gtype, off = take("<IQ")
        infos.append((name, dims, gtype, off))
    data_start = pos + (alignment - pos % alignment) % alignment
    tensors = {}
    for name, dims, gtype, off in infos:
        n = 1
        for d in dims:
            n *= d
        start = data_start + off
        tensors[name] = (dims, gtype, buf[start:start + n * _TYPE_SIZE[gtype]])
    return meta, tensors
