"""The injection model's features and file, shared by train.py and
evaluate.py; gateway/engine/src/governance/injection_model.rs is the same
thing in Rust, byte for byte.

A text's UTF-8 bytes are cut into tokens: a maximal run of word bytes (ASCII
letters and digits, and every byte >= 0x80), ASCII-lowercased and cut to its
first 32 bytes; every other byte but ASCII whitespace (space, \\t, \\n, \\r,
0x0b, 0x0c) on its own. The tokens are read in windows of 128 tokens, one
starting every 64 (the last one ends at the last token; a text of at most
128 tokens is one window). A window's features are b"u" + token for each
token and b"b" + a + b"\\0" + b for each adjacent pair, each hashed with
64-bit FNV-1a into one of 2^18 buckets (hash & (2^18 - 1)): the SET of
buckets (presence, not counts). z = bias + sum of the buckets' weights,
p = 1 / (1 + exp(-z)). A text is flagged when one of its windows is
(p >= threshold); an injection is a local thing, and a window keeps a long
ordinary text around it from drowning it out."""

import math
import re
import struct

N_BUCKETS = 1 << 18
MASK = N_BUCKETS - 1
TOKEN_BYTES = 32
WINDOW = 128
STRIDE = 64
MAGIC = b"TGINJ02\0"

OFFSET = 0xCBF29CE484222325
PRIME = 0x100000001B3
M64 = (1 << 64) - 1

TOKEN_RE = re.compile(rb"[A-Za-z0-9\x80-\xff]+|[^A-Za-z0-9\x80-\xff \t\n\r\x0b\x0c]")


def fnv(h, data):
    for c in data:
        h = ((h ^ c) * PRIME) & M64
    return h


H_U = fnv(OFFSET, b"u")
H_B = fnv(OFFSET, b"b")
_token_memo = {}  # token -> (unigram bucket, FNV state after b"b" + token + b"\0")
_pair_memo = {}  # (a, b) -> bigram bucket


def tokens(data):
    """The tokens of `data` (bytes), lowercased and cut."""
    return [t for _, t in tokens_at(data)]


def tokens_at(data):
    """(byte offset, token) of each token of `data` (bytes)."""
    return [(m.start(), m.group().lower()[:TOKEN_BYTES]) for m in TOKEN_RE.finditer(data)]


def windows(n):
    """The (start, end) token ranges of the windows of `n` tokens (none for 0)."""
    if n <= WINDOW:
        return [(0, n)] if n else []
    out, lo = [], 0
    while True:
        hi = min(lo + WINDOW, n)
        out.append((lo, hi))
        if hi == n:
            return out
        lo += STRIDE


def _token(t):
    r = _token_memo.get(t)
    if r is None:
        r = (fnv(H_U, t) & MASK, fnv(fnv(H_B, t), b"\0"))
        _token_memo[t] = r
    return r


def features(text):
    """The sorted, distinct buckets of `text` (str or bytes) read as one
    window."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return window_features(tokens(data))


def window_features(toks):
    """The sorted, distinct buckets of the tokens `toks`."""
    out = set()
    prev = None
    for t in toks:
        uni, _ = _token(t)
        out.add(uni)
        if prev is not None:
            key = (prev, t)
            b = _pair_memo.get(key)
            if b is None:
                b = fnv(_token(prev)[1], t) & MASK
                _pair_memo[key] = b
            out.add(b)
        prev = t
    return sorted(out)


def sigmoid(z):
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


class Model:
    """Weights as floats (i8 * scale, as the Rust side reads them)."""

    def __init__(self, q, scale, bias, threshold):
        self.q, self.scale, self.bias, self.threshold = q, scale, bias, threshold
        self.w = [v * scale for v in q]

    @classmethod
    def read(cls, path):
        data = open(path, "rb").read()
        assert data[:8] == MAGIC, "not a toolgate injection model"
        n, scale, bias, threshold = struct.unpack_from("<Ifff", data, 8)
        assert len(data) == 24 + n == 24 + N_BUCKETS, "size"
        q = list(struct.unpack_from(f"<{n}b", data, 24))
        return cls(q, scale, bias, threshold)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(MAGIC + struct.pack("<Ifff", N_BUCKETS, self.scale, self.bias, self.threshold))
            f.write(struct.pack(f"<{N_BUCKETS}b", *self.q))

    def z(self, feats):
        w = self.w
        return self.bias + sum(w[b] for b in feats)

    def score(self, text):
        """The highest probability of `text`'s windows (0.0 for "")."""
        toks = tokens(text.encode("utf-8"))
        return max((sigmoid(self.z(window_features(toks[a:b]))) for a, b in windows(len(toks))), default=0.0)

    def flags(self, text):
        return self.score(text) >= self.threshold
