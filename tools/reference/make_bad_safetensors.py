#!/usr/bin/env python3
"""Write the corpus of malformed safetensors files under tests/data/safetensors/bad/.

Plain Python (no torch):  python3 tools/reference/make_bad_safetensors.py
Each file breaks one rule of the format. bad/expected.json maps each file name to what
tests/io/test_safetensors.cpp requires of the error it raises:
  code      the fluxrt::ErrorCode name
  contains  substrings the (single-line) message must hold, besides the file name; for files
            whose fault is in one tensor this includes the tensor name as the message prints it
The same files seed the fuzzer (tests/fuzz/).
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "safetensors", "bad")


def pack(header_bytes, data=b"", length=None):
    """u64 little-endian length, header, data; `length` overrides the stored header length."""
    n = len(header_bytes) if length is None else length
    return struct.pack("<Q", n) + header_bytes + data


def header(obj):
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return text + b" " * ((8 - len(text) % 8) % 8)


def f32_entry(shape, begin, end, dtype="F32"):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


GOOD_HEADER = header({"weight": f32_entry([2, 2], 0, 16), "bias": f32_entry([2], 16, 24)})
GOOD = pack(GOOD_HEADER, bytes(range(24)))

CASES = {}


def case(name, content, code="Format", contains=()):
    CASES[name] = (content, code, list(contains))


case("empty.safetensors", b"", contains=["empty"])
case("seven_bytes.safetensors", b"\x10\x00\x00\x00\x00\x00\x00", contains=["7 bytes"])
case("header_len_zero.safetensors", pack(b"", b"{}"), contains=["header length 0"])
case("header_len_past_end.safetensors", pack(GOOD_HEADER, b"", length=len(GOOD_HEADER) + 1),
     contains=["past the end"])
case("header_len_huge.safetensors", pack(GOOD_HEADER, b"", length=2**63 + 5), contains=["limit"])
case("truncated_header.safetensors", GOOD[: 8 + len(GOOD_HEADER) // 2], contains=["past the end"])
case("truncated_data.safetensors", GOOD[:-5], contains=['"bias"', "past the data section"])
case("invalid_json.safetensors", pack(b'{"weight": {"dtype": "F32", ', bytes(16)), contains=["not valid JSON"])
case("trailing_garbage.safetensors", pack(b'{} x', b""), contains=["not valid JSON"])
case("json_not_object.safetensors", pack(b"[1, 2, 3]"), contains=["array"])
case("json_string.safetensors", pack(b'"weight"'), contains=["string"])
case("entry_not_object.safetensors", pack(header({"weight": 5})), contains=['"weight"', "number"])
case("overlapping.safetensors",
     pack(header({"a": f32_entry([4], 0, 16), "b": f32_entry([4], 8, 24)}), bytes(24)),
     contains=['"a"', '"b"', "overlap"])
case("overlapping_contained.safetensors",
     pack(header({"outer": f32_entry([8], 0, 32), "inner": f32_entry([1], 4, 8),
                  "later": f32_entry([2], 24, 32)}), bytes(32)),
     contains=['"outer"', "overlap"])
case("wrong_size.safetensors", pack(header({"weight": f32_entry([2, 2], 0, 12)}), bytes(12)),
     contains=['"weight"', "needs 16"])
case("wrong_size_bf16.safetensors", pack(header({"w.bf16": f32_entry([3], 0, 12, "BF16")}), bytes(12)),
     contains=['"w.bf16"', "needs 6"])
case("offsets_past_end.safetensors", pack(header({"weight": f32_entry([250], 0, 1000)}), bytes(16)),
     contains=['"weight"', "past the data section"])
case("begin_after_end.safetensors", pack(header({"weight": f32_entry([4], 16, 0)}), bytes(16)),
     contains=['"weight"', "end before"])
case("offsets_wrong_arity.safetensors",
     pack(header({"weight": {"dtype": "F32", "shape": [4], "data_offsets": [0]}}), bytes(16)),
     contains=['"weight"', "data_offsets"])
case("offsets_negative.safetensors", pack(header({"weight": f32_entry([4], -16, 0)}), bytes(16)),
     contains=['"weight"', "data_offsets"])
case("unknown_dtype.safetensors", pack(header({"weight": f32_entry([4], 0, 16, "F33")}), bytes(16)),
     contains=['"weight"', '"F33"'])
case("dtype_not_string.safetensors", pack(header({"weight": f32_entry([4], 0, 16, 4)}), bytes(16)),
     contains=['"weight"', "dtype"])
case("unsupported_dtype.safetensors", pack(header({"weight": f32_entry([4], 0, 16, "U32")}), bytes(16)),
     code="Unsupported", contains=['"weight"', '"U32"'])
case("missing_dtype.safetensors",
     pack(header({"weight": {"shape": [4], "data_offsets": [0, 16]}}), bytes(16)), contains=['"weight"', "dtype"])
case("missing_shape.safetensors",
     pack(header({"weight": {"dtype": "F32", "data_offsets": [0, 16]}}), bytes(16)), contains=['"weight"', "shape"])
case("missing_offsets.safetensors",
     pack(header({"weight": {"dtype": "F32", "shape": [4]}}), bytes(16)), contains=['"weight"', "data_offsets"])
case("shape_negative.safetensors", pack(header({"weight": f32_entry([-1, 4], 0, 16)}), bytes(16)),
     contains=['"weight"', "shape"])
case("shape_float.safetensors", pack(header({"weight": f32_entry([2.5, 4], 0, 40)}), bytes(40)),
     contains=['"weight"', "shape"])
case("shape_string.safetensors", pack(header({"weight": f32_entry(["4"], 0, 16)}), bytes(16)),
     contains=['"weight"', "shape"])
case("shape_not_array.safetensors", pack(header({"weight": f32_entry(4, 0, 16)}), bytes(16)),
     contains=['"weight"', "shape"])
case("shape_overflow.safetensors", pack(header({"weight": f32_entry([2**62, 2**62, 4], 0, 0)}), bytes(8)),
     contains=['"weight"', "too many elements"])
case("shape_overflow_with_zero.safetensors", pack(header({"weight": f32_entry([2**62, 2**62, 0], 0, 0)}), bytes(8)),
     contains=['"weight"', "too many elements"])
case("shape_overflow_bytes.safetensors", pack(header({"weight": f32_entry([2**62], 0, 0, "F64")}), bytes(8)),
     contains=['"weight"', "too many elements"])
case("rank_too_large.safetensors", pack(header({"weight": f32_entry([1] * 9, 0, 4)}), bytes(8)),
     code="Unsupported", contains=['"weight"', "rank 9"])
# Built by hand: json.dumps cannot write invalid UTF-8.
bad_name = b'{"w\xff\xfeight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
case("non_utf8_name.safetensors", pack(bad_name + b" " * ((8 - len(bad_name) % 8) % 8), bytes(16)),
     contains=['"w\\xff\\xfeight"', "UTF-8"])
overlong = b'{"a\xc0\xafb":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
case("overlong_utf8_name.safetensors", pack(overlong, bytes(4)), contains=['"a\\xc0\\xafb"', "UTF-8"])
case("newline_in_name.safetensors", pack(header({"line1\nline2": f32_entry([4], 0, 12)}), bytes(12)),
     contains=['"line1\\nline2"'])
case("duplicate_tensor.safetensors",
     pack(b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
          b'"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', bytes(8)),
     contains=['"w"', "twice"])
case("metadata_not_object.safetensors", pack(header({"__metadata__": "pt", "w": f32_entry([1], 0, 4)}), bytes(4)),
     contains=["__metadata__"])
case("metadata_not_strings.safetensors",
     pack(header({"__metadata__": {"format": "pt", "step": 1000}, "w": f32_entry([1], 0, 4)}), bytes(4)),
     contains=['"step"', "__metadata__"])
case("metadata_bad_utf8.safetensors",
     pack(b'{"__metadata__":{"note":"caf\xe9"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(4)),
     contains=['"caf\\xe9"', "UTF-8"])
case("deep_nesting.safetensors", pack(b'{"w":' + b"[" * 200 + b"]" * 200 + b"}"), contains=["nests deeper"])
case("lone_surrogate.safetensors",
     pack(b'{"w\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(4)), contains=["not valid JSON"])


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        os.remove(os.path.join(OUT, old))
    expected = {}
    for name, (content, code, contains) in CASES.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(content)
        expected[name] = {"code": code, "contains": contains}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(CASES)} files to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
