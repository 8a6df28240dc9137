"""A tiny safetensors reader for the e2e tests (the safetensors package is not installed)."""
import json
import struct

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "BOOL": np.bool_}


def read_raw(path):
    """name -> (dtype name, shape, raw bytes), for byte-exact comparisons."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[base + begin:base + end])
    return out


def read_safetensors(path):
    """name -> numpy array (read-only view of the file's bytes)."""
    return {name: np.frombuffer(raw, dtype=DTYPES[dtype]).reshape(shape)
            for name, (dtype, shape, raw) in read_raw(path).items()}
