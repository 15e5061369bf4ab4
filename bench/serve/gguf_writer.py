"""A minimal GGUF (version 3) writer: metadata key/values and f32 tensors.

The format is ggml's `docs/gguf.md`: the magic `GGUF`, version, tensor and key/value counts, the
key/values (typed), the tensor infos (name, dims in ggml order — fastest first, the reverse of
numpy's shape —, type, offset into the data section), then the data section, every tensor aligned
to `general.alignment` (32 bytes). All integers little-endian.
"""
import struct

import numpy as np

ALIGNMENT = 32

# gguf_type (docs/gguf.md)
UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64 = 4, 5, 6, 7, 8, 9, 10
GGML_TYPE_F32 = 0


def _string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


SCALAR_FORMATS = {UINT32: "<I", INT32: "<i", FLOAT32: "<f", BOOL: "<?", UINT64: "<Q"}


def _value(kind, v):
    if kind == STRING:
        return _string(v)
    if kind == ARRAY:
        elem, items = v
        out = struct.pack("<IQ", elem, len(items))
        if elem == STRING:
            return out + b"".join(_string(x) for x in items)
        fmt = {UINT32: "<u4", INT32: "<i4", FLOAT32: "<f4"}[elem]
        return out + np.asarray(items, dtype=fmt).tobytes()
    return struct.pack(SCALAR_FORMATS[kind], v)


def write_gguf(path, metadata, tensors):
    """metadata: list of (key, gguf_type, value); an ARRAY value is (element type, list).
    tensors: list of (name, numpy array); written as f32 with dims reversed (ggml order)."""
    header = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(metadata) + 1)]
    for key, kind, v in list(metadata) + [("general.alignment", UINT32, ALIGNMENT)]:
        header += [_string(key), struct.pack("<I", kind), _value(kind, v)]
    blobs, offset = [], 0
    for name, array in tensors:
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        dims = list(reversed(array.shape))
        header += [_string(name), struct.pack("<I", len(dims)), struct.pack(f"<{len(dims)}Q", *dims),
                   struct.pack("<IQ", GGML_TYPE_F32, offset)]
        pad = -len(data) % ALIGNMENT
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = b"".join(header)
    with open(path, "wb") as f:
        f.write(head + b"\0" * (-len(head) % ALIGNMENT))
        for b in blobs:
            f.write(b)
