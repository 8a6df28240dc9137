"""Makes examples/tiny-corpus.npy: a byte-level token array [N, S+1] (int32, vocab 256) cut from
examples/tiny-corpus.txt, the data `make demo` trains on. Run with any Python that has numpy:

    /usr/bin/python3 examples/make_tiny_corpus.py
"""
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SEQ = 64

text = open(os.path.join(HERE, "tiny-corpus.txt"), "rb").read()
tokens = np.frombuffer(text, dtype=np.uint8).astype(np.int32)
rows = (len(tokens) - 1) // SEQ
# Overlapping windows of S+1 tokens, one every S tokens (the last token of a row starts the next).
data = np.stack([tokens[i * SEQ : i * SEQ + SEQ + 1] for i in range(rows)])
np.save(os.path.join(HERE, "tiny-corpus.npy"), data)
print(f"wrote tiny-corpus.npy: {data.shape[0]} rows of {data.shape[1]} byte tokens")
