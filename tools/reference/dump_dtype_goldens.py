#!/usr/bin/env python3
"""Dump PyTorch's dtype conversion results as goldens for tests/unit/test_dtype.cpp.

Run with the reference venv:  /work/refenv/bin/python tools/reference/dump_dtype_goldens.py
Writes tests/data/dtype/*.bin.gz (format below) and prints a summary of where torch's
contiguous (vectorised) .to() path differs from its strided (scalar c10) path.

File format (gzip-compressed): a sequence of records, each
    u16 name_length, name bytes (ASCII), u32 element_size, u64 count, count*element_size bytes
all little endian. Integers and floats are stored as raw bit patterns.

The big f32 -> f16/bf16/f8 input sets are NOT stored: tests/unit/test_dtype.cpp regenerates them
with the same recipe (f32_input_set below) and checks a stored 64-bit hash of the set first.
Everything else stores its inputs next to the outputs.
"""
import gzip
import os
import struct
import sys

import numpy as np
import torch

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "dtype")

MASK64 = (1 << 64) - 1


class SplitMix64:
    """The PRNG the C++ test reimplements (Vigna's splitmix64)."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def hash_u32(words):
    """FNV-1a style over 32-bit words; the C++ test computes the same to check its input set."""
    h = 0xCBF29CE484222325
    for w in words:
        h = ((h ^ int(w)) * 0x100000001B3) & MASK64
    return h


# ---------------------------------------------------------------------------------------------
# Shared recipe for the f32 input sets (mirrored in tests/unit/test_dtype.cpp).

# Hand-picked f32 bit patterns: zeros, infinities, NaNs with assorted payloads and signs, f32
# subnormals, normal-range edges, and overflow edges of each narrow format.
SPECIAL_F32 = [
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000,
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0xFFA00000, 0x7FBFFFFF,
    0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00001, 0x7FE00000, 0x7FD55555, 0xFF955555, 0x7F802000,
    0x7F801FFF, 0x7FC02000, 0x7F80E000, 0x7F8FFFFF, 0x7FF00000, 0xFFC12345,
    0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000, 0x00000002,
    0x00800000, 0x80800000, 0x00800001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,
    0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF, 0x40000000, 0x3F000000,
    0x477FE000, 0x477FF000, 0x477FEFFF, 0x477FF001, 0x47800000, 0xC77FF000,  # f16 max/overflow
    0x7F7F0000, 0x7F7F8000, 0x7F7F7FFF, 0xFF7F8000,                          # bf16 max/overflow
    0x43E00000, 0x43E80000, 0x43F00000, 0x43EFFFFF, 0x43E7FFFF, 0x43E80001,  # e4m3 448/464/480
    0x44000000, 0xC3E80000, 0xC3F00000,
    0x47600000, 0x47700000, 0x476FFFFF, 0x47700001, 0x47800000, 0xC7700000,  # e5m2 57344/61440
    0x33800000, 0x33000000, 0x33000001, 0x32FFFFFF, 0x387FC000, 0x38800000,  # f16 subnormal edges
    0x387FE000, 0x387FDFFF, 0x3B000000, 0x3A800000, 0x3A800001, 0x3C000000,  # e4m3 subnormal edges
    0x37800000, 0x37000000, 0x37000001, 0x38000000, 0x36FFFFFF,              # e5m2 subnormal edges
]

FORMATS = {
    # name: (torch dtype, largest positive finite bit pattern, exponent bits, mantissa bits, bias)
    "f16": (torch.float16, 0x7BFF, 5, 10, 15),
    "bf16": (torch.bfloat16, 0x7F7F, 8, 7, 127),
    "f8e4m3": (torch.float8_e4m3fn, 0x7E, 4, 3, 7),
    "f8e5m2": (torch.float8_e5m2, 0x7B, 5, 2, 15),
}

RANDOM_F32_COUNT = 100000
RANDOM_F32_SEED = 0xF1F1F32


def patterns_to_f64(name, count):
    dt = FORMATS[name][0]
    if dt.itemsize == 2:
        raw = torch.from_numpy(np.arange(count, dtype=np.uint16).view(np.int16)).view(dt)
    else:
        raw = torch.from_numpy(np.arange(count, dtype=np.uint8)).view(dt)
    return raw.to(torch.float64).numpy()


def f32_bits_exact(x):
    f = np.float32(x)
    assert float(f) == float(x), f"{x!r} is not exact in f32"
    return int(np.array([f], dtype=np.float32).view(np.uint32)[0])


def grid_f32(name):
    """Every finite value of the format, each midpoint to the next value (the last one is the
    overflow midpoint), and the f32 neighbours of each midpoint; then the same negated."""
    maxp = FORMATS[name][1]
    vals = patterns_to_f64(name, maxp + 1)
    out = []
    for p in range(maxp + 1):
        v = float(vals[p])
        hi = float(vals[p + 1]) if p < maxp else v + (v - float(vals[p - 1]))
        mb = f32_bits_exact((v + hi) / 2)
        out += [f32_bits_exact(v), mb, mb - 1, mb + 1]
    return out + [b | 0x80000000 for b in out]


def random_f32():
    rng = SplitMix64(RANDOM_F32_SEED)
    return [rng.next() >> 32 for _ in range(RANDOM_F32_COUNT)]


def f32_input_set(name):
    return SPECIAL_F32 + grid_f32(name) + random_f32()


# ---------------------------------------------------------------------------------------------
# Torch conversions. One thread, and inputs padded to a multiple of 256 elements, so every element
# goes through the main vectorised loop of the contiguous copy kernel (its partial-vector tail
# handles a few NaN cases differently, see README.md).

torch.set_num_threads(1)

NP_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
NP_INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
TORCH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def from_bits(bits, dtype):
    size = dtype.itemsize
    arr = np.asarray(bits, dtype=np.uint64).astype(NP_UINT[size])
    if size == 1:
        return torch.from_numpy(arr.copy()).view(dtype)
    return torch.from_numpy(arr.view(NP_INT[size]).copy()).view(dtype)


def to_bits(t):
    t = t.contiguous()
    size = t.element_size()
    if t.dtype == torch.bool:
        return t.to(torch.uint8).numpy().copy()
    return t.view(TORCH_INT[size]).numpy().view(NP_UINT[size]).copy()


def torch_convert(src, dtype):
    n = src.numel()
    pad = (-n) % 256
    padded = torch.cat([src, torch.zeros(pad, dtype=src.dtype)])
    out = to_bits(padded.to(dtype))[:n]
    # The same elements shifted by one vector block must give the same bits.
    shifted = torch.cat([torch.zeros(256, dtype=src.dtype), padded])
    assert (to_bits(shifted.to(dtype))[256:256 + n] == out).all(), "position-dependent result"
    return out


SCALAR_DIFFS = []


def note_scalar_path(label, src, dtype, vec_out):
    """Records where the strided (scalar c10) path disagrees with the contiguous path."""
    big = torch.empty(src.numel() * 2, dtype=src.dtype)
    big[::2] = src
    scalar = to_bits(big[::2].to(dtype))
    diff = np.nonzero(scalar != vec_out)[0]
    if len(diff):
        src_bits = to_bits(src)
        ex = ", ".join(f"{src_bits[i]:#x}->{vec_out[i]:#x} (scalar {scalar[i]:#x})" for i in diff[:3])
        SCALAR_DIFFS.append(f"{label}: {len(diff)} differ, e.g. {ex}")


# ---------------------------------------------------------------------------------------------

class Writer:
    def __init__(self, filename):
        self.path = os.path.join(OUT_DIR, filename)
        self.chunks = []

    def add(self, name, array):
        array = np.ascontiguousarray(array)
        nb = name.encode("ascii")
        self.chunks.append(struct.pack("<H", len(nb)) + nb +
                           struct.pack("<IQ", array.dtype.itemsize, array.size) + array.tobytes())

    def close(self):
        with gzip.GzipFile(self.path, "wb", compresslevel=9, mtime=0) as f:
            f.write(b"".join(self.chunks))
        print(f"wrote {self.path}: {os.path.getsize(self.path)} bytes")


def dump_to_f32():
    """All 65,536 f16/bf16 patterns and all 256 of each fp8 format, to f32 and to each other."""
    w = Writer("narrow_to_wide.bin.gz")
    all16 = np.arange(65536, dtype=np.uint64)
    all8 = np.arange(256, dtype=np.uint64)
    sources = {
        "f16": from_bits(all16, torch.float16),
        "bf16": from_bits(all16, torch.bfloat16),
        "f8e4m3": from_bits(all8, torch.float8_e4m3fn),
        "f8e5m2": from_bits(all8, torch.float8_e5m2),
    }
    targets = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
               "bf16": torch.bfloat16, "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}
    for sname, src in sources.items():
        for tname, tdt in targets.items():
            # 16-bit -> f64 is f16/bf16 -> f32 followed by an exact widening; not stored.
            if sname == tname or (tname == "f64" and src.element_size() == 2):
                continue
            out = torch_convert(src, tdt)
            note_scalar_path(f"{sname}->{tname}", src, tdt, out)
            w.add(f"{sname}_to_{tname}", out)
    w.close()


def dump_f32_to_narrow():
    w = Writer("f32_to_narrow.bin.gz")
    for name, (dt, *_rest) in FORMATS.items():
        inputs = f32_input_set(name)
        src = from_bits(inputs, torch.float32)
        out = torch_convert(src, dt)
        note_scalar_path(f"f32->{name}", src, dt, out)
        w.add(f"f32_to_{name}.input_hash", np.array([hash_u32(inputs)], dtype=np.uint64))
        if name == "bf16":
            # Stored minus the truncated input (mostly 0 or 1) so that gzip can squeeze the
            # 100k random cases; the test adds (input >> 16) back.
            trunc = (np.array(inputs, dtype=np.uint32) >> 16).astype(np.uint16)
            w.add("f32_to_bf16.minus_trunc", (out - trunc).astype(np.uint16))
        else:
            w.add(f"f32_to_{name}", out)
    special = from_bits(SPECIAL_F32, torch.float32)
    w.add("special_f32_to_f64", torch_convert(special, torch.float64))
    w.close()


def f64_bits(x):
    return int(np.array([x], dtype=np.float64).view(np.uint64)[0])


def f64_input_set():
    """Doubles that are hard to narrow: midpoints of f32/f16/bf16 (where f64 -> f32 -> f16
    double-rounds), their f64 neighbours and points a hair off them, overflow and underflow
    edges, NaN payloads, and random bit patterns."""
    rng = SplitMix64(0xD0B1E)
    bits = [
        0x0000000000000000, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
        0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFF0000000000001,
        0x7FF4000000000000, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0x7FF8000020000000,
        0x7FF0000020000000, 0x7FF000001FFFFFFF, 0x7FF0040000000000, 0x7FF8000000000001,
        0x0000000000000001, 0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF,
        0xFFEFFFFFFFFFFFFF, 0x8000000000000001,
    ]
    vals = []
    for e in (-149, -150, -151, -126, -127, -24, -25, -26, -14, -15, -133, -134, 127, 128, 129, 1024 - 1):
        for k in (1.0, 0.75, 1.5, 1.25):
            vals.append(k * 2.0 ** e)
    vals += [3.4028235677973366e38, 3.4028235677973366e38 * (1 + 2 ** -30), 2.0 ** 128 - 2.0 ** 103,
             65504.0, 65520.0, 65536.0, 448.0, 464.0, 480.0, 57344.0, 61440.0]

    def around(m):
        m = float(m)
        return [m, np.nextafter(m, np.inf), np.nextafter(m, -np.inf), m * (1 + 2.0 ** -40),
                m * (1 - 2.0 ** -40)]

    for name, step in (("f16", 127), ("bf16", 127), ("f8e4m3", 1), ("f8e5m2", 1)):
        maxp = FORMATS[name][1]
        fv = patterns_to_f64(name, maxp + 1)
        picks = sorted(set(list(range(0, maxp + 1, step)) + [1, 2, maxp - 1, maxp]))
        for p in picks:
            hi = fv[p + 1] if p < maxp else fv[p] + (fv[p] - fv[p - 1])
            vals += around((fv[p] + hi) / 2)
    for _ in range(500):  # f32 midpoints (f32 neighbours are exact in f64)
        b = (rng.next() >> 33) % 0x7F7FFFFF
        lo = np.array([b], dtype=np.uint32).view(np.float32)[0]
        hi = np.array([b + 1], dtype=np.uint32).view(np.float32)[0]
        vals += around((np.float64(lo) + np.float64(hi)) / 2)
    bits += [f64_bits(v) for v in vals]
    for _ in range(1500):  # random patterns
        bits.append(rng.next())
    for _ in range(1500):  # random magnitudes in and around the f32/f16 ranges
        r = rng.next()
        exp = 1023 - 160 + (r >> 52) % 300
        bits.append((r & 0x800FFFFFFFFFFFFF) | (exp << 52))
    neg = [b ^ 0x8000000000000000 for b in bits]
    return np.array(bits + neg, dtype=np.uint64)


def dump_f64():
    w = Writer("f64_to_narrow.bin.gz")
    inputs = f64_input_set()
    w.add("inputs", inputs)
    src = from_bits(inputs, torch.float64)
    for tname, tdt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16),
                       ("f8e4m3", torch.float8_e4m3fn), ("f8e5m2", torch.float8_e5m2)):
        out = torch_convert(src, tdt)
        note_scalar_path(f"f64->{tname}", src, tdt, out)
        w.add(f"f64_to_{tname}", out)
    w.close()


INT_TARGETS = (("i8", torch.int8), ("u8", torch.uint8), ("i16", torch.int16), ("i32", torch.int32),
               ("i64", torch.int64), ("bool", torch.bool))


def float_to_int_inputs(rng):
    """Values around every integer range edge (+-0.5, +-1, +-ulp), fractions, NaN, Inf, and
    random values of every magnitude up to 2^70. Returned as f64; the f32 set is their f32
    rounding plus random f32 bit patterns."""
    vals = [0.0, -0.0, 0.25, -0.25, 0.5, -0.5, 0.75, -0.75, 0.999, -0.999, 1.0, -1.0, 1.5, -1.5,
            2.5, -2.5, float("inf"), float("-inf"), float("nan"), -float("nan")]
    for e in (7, 8, 15, 16, 24, 31, 32, 53, 63, 64):
        for s in (1.0, -1.0):
            b = s * 2.0 ** e
            for d in (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5):
                vals.append(b + d)
            vals += [np.nextafter(b, np.inf), np.nextafter(b, -np.inf),
                     float(np.nextafter(np.float32(b), np.float32(np.inf))),
                     float(np.nextafter(np.float32(b), np.float32(-np.inf)))]
    for _ in range(1000):
        r = rng.next()
        mag = (r >> 11) * 2.0 ** -53 * 2.0 ** ((r & 0x7F) % 71)
        vals.append(-mag if r & 0x400 else mag)
    return np.array(vals, dtype=np.float64)


def int_edge_inputs(rng, bits):
    vals = [0, 1, -1, 2, -2, 3]
    for e in range(bits - 1):
        for d in (-3, -2, -1, 0, 1, 2, 3):
            vals += [(1 << e) + d, -(1 << e) + d]
    vals += [(1 << (bits - 1)) - 1, -(1 << (bits - 1)), (1 << (bits - 1)) - 2]
    # Ties and near-ties of f32 (24-bit) and f16/bf16 rounding at every shift.
    for s in range(0, bits - 25):
        for m in ((1 << 24) + 1, (1 << 24) + 3, (1 << 25) - 1, (1 << 24) + (1 << 12)):
            vals += [m << s, (m << s) + 1, (m << s) - 1, -(m << s)]
    for _ in range(1000):
        r = rng.next()
        width = 1 + (r & 0x3F) % bits
        v = (rng.next() >> (64 - width)) if width else 0
        vals.append(-v if r & 0x40 else v)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    vals = [v for v in vals if lo <= v <= hi]
    return np.array(vals, dtype=np.int64)


def dump_ints():
    w = Writer("int_conversions.bin.gz")
    rng = SplitMix64(0x1A7E6E5)
    f64_in = float_to_int_inputs(rng)
    f32_rand = np.array([rng.next() >> 32 for _ in range(1000)], dtype=np.uint32)
    f32_in = np.concatenate([f64_in.astype(np.float32).view(np.uint32), f32_rand])
    w.add("f32_inputs", f32_in)
    w.add("f64_inputs", f64_in.view(np.uint64))
    src32 = from_bits(f32_in, torch.float32)
    src64 = torch.from_numpy(f64_in.copy())
    for tname, tdt in INT_TARGETS:
        for sname, src in (("f32", src32), ("f64", src64)):
            out = torch_convert(src, tdt)
            note_scalar_path(f"{sname}->{tname}", src, tdt, out)
            w.add(f"{sname}_to_{tname}", out)
    float_targets = (("f64", torch.float64), ("f32", torch.float32), ("f16", torch.float16),
                     ("bf16", torch.bfloat16), ("f8e4m3", torch.float8_e4m3fn),
                     ("f8e5m2", torch.float8_e5m2))
    for sname, sdt, width in (("i64", torch.int64, 64), ("i32", torch.int32, 32)):
        ints = int_edge_inputs(rng, width)
        src = torch.from_numpy(ints).to(sdt)
        w.add(f"{sname}_inputs", to_bits(src))
        for tname, tdt in float_targets + INT_TARGETS:
            if tname == sname:
                continue
            out = torch_convert(src, tdt)
            note_scalar_path(f"{sname}->{tname}", src, tdt, out)
            w.add(f"{sname}_to_{tname}", out)
    w.close()


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    print("torch", torch.__version__, "cpu capability", torch.backends.cpu.get_cpu_capability())
    dump_to_f32()
    dump_f32_to_narrow()
    dump_f64()
    dump_ints()
    print("contiguous vs strided (scalar) path differences:")
    for line in SCALAR_DIFFS:
        print("  " + line)
    total = sum(os.path.getsize(os.path.join(OUT_DIR, f)) for f in os.listdir(OUT_DIR))
    print(f"total {total} bytes in {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
