"""A safe, exact codec for engine snapshots: JSON structure + raw numpy arrays (no pickle).

Snapshots live in Redis / Kafka; unpickling them would hand code execution to anyone who can write there, so the
format is a JSON header describing the tree of dicts/lists/scalars, with every ``numpy.ndarray`` and ``bytes``
value stored as a raw little-endian buffer after the header. Round trips are bit-exact (floats included).
"""

from __future__ import annotations

import struct

import numpy as np
import orjson

_MAGIC = b"SDPS1\n"


def encode(obj) -> bytes:
    buffers: list[bytes] = []

    def walk(x):
        if isinstance(x, np.ndarray):
            a = np.ascontiguousarray(x)
            if a.dtype == object:
                raise TypeError("object arrays cannot be snapshotted")
            buffers.append(a.tobytes())
            return {"__nd__": len(buffers) - 1, "dtype": a.dtype.str, "shape": list(a.shape)}
        if isinstance(x, (bytes, bytearray, memoryview)):
            buffers.append(bytes(x))
            return {"__bytes__": len(buffers) - 1}
        if isinstance(x, dict):
            for k in x:
                if not isinstance(k, str):
                    raise TypeError(f"snapshot dict keys must be str, got {type(k).__name__}")
            return {"__dict__": {k: walk(v) for k, v in x.items()}}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        if isinstance(x, (np.integer,)):
            return int(x)
        if isinstance(x, (np.floating,)):
            return {"__f__": float(x).hex()}
        if isinstance(x, float):
            return {"__f__": x.hex()}  # exact, and inf/nan safe
        if x is None or isinstance(x, (bool, int, str)):
            return x
        raise TypeError(f"cannot snapshot a {type(x).__name__}")

    header = orjson.dumps(walk(obj))
    out = [_MAGIC, struct.pack("<QI", len(header), len(buffers)), header]
    for b in buffers:
        out.append(struct.pack("<Q", len(b)))
        out.append(b)
    return b"".join(out)


def decode(data: bytes):
    if not data.startswith(_MAGIC):
        raise ValueError("not a streamdp snapshot")
    off = len(_MAGIC)
    hlen, nbuf = struct.unpack_from("<QI", data, off)
    off += 12
    header = orjson.loads(data[off:off + hlen])
    off += hlen
    buffers = []
    for _ in range(nbuf):
        (n,) = struct.unpack_from("<Q", data, off)
        off += 8
        buffers.append(data[off:off + n])
        off += n

    def walk(x):
        if isinstance(x, dict):
            if "__nd__" in x:
                a = np.frombuffer(buffers[x["__nd__"]], dtype=np.dtype(x["dtype"]))
                return a.reshape(x["shape"]).copy()
            if "__bytes__" in x:
                return bytes(buffers[x["__bytes__"]])
            if "__f__" in x:
                return float.fromhex(x["__f__"])
            return {k: walk(v) for k, v in x["__dict__"].items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(header)
