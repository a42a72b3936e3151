#!/usr/bin/env python3
"""Writes CBOR test vectors produced by cbor2, the reference Python CBOR
implementation, to Tests/BleotaCodecTests/Fixtures/cbor2-VERSION.json.

    python3 -m venv .build-venv && .build-venv/bin/pip install cbor2
    .build-venv/bin/python scripts/cbor-vectors.py

Each vector has the bytes (hex), the value in a typed JSON form the Swift
tests rebuild, and whether cbor2 itself encodes the value to those bytes
("canonical"); the rest are encodings cbor2 only decodes (indefinite
lengths, non-shortest heads), written by hand and checked by cbor2 here.
"""
import json
import math
from importlib.metadata import version
from pathlib import Path

import cbor2


def typed(value):
    """The typed JSON form: {"u": n}, {"n": raw}, {"b": hex}, {"t": s}, {"a": [...]}, {"m": [[k, v]...]}, ..."""
    if isinstance(value, bool):
        return {"bool": value}
    if value is None:
        return {"null": None}
    if value is cbor2.undefined:
        return {"undefined": None}
    if isinstance(value, int):
        return {"u": str(value)} if value >= 0 else {"n": str(-1 - value)}
    if isinstance(value, float):
        if math.isnan(value):
            return {"f": "nan"}
        if math.isinf(value):
            return {"f": "inf" if value > 0 else "-inf"}
        return {"f": value}
    if isinstance(value, bytes):
        return {"b": value.hex()}
    if isinstance(value, str):
        return {"t": value}
    if isinstance(value, list):
        return {"a": [typed(item) for item in value]}
    if isinstance(value, dict):
        return {"m": [[typed(k), typed(v)] for k, v in value.items()]}
    if isinstance(value, cbor2.CBORTag):
        return {"tag": [value.tag, typed(value.value)]}
    if isinstance(value, cbor2.CBORSimpleValue):
        return {"simple": value.value}
    raise TypeError(type(value))


values = {
    "zero": 0, "uint 23": 23, "uint 24": 24, "uint 255": 255, "uint 256": 256, "uint 65535": 65535,
    "uint 65536": 65536, "uint 2^32-1": 2**32 - 1, "uint 2^32": 2**32, "uint 2^64-1": 2**64 - 1,
    "neg -1": -1, "neg -24": -24, "neg -25": -25, "neg -256": -256, "neg -257": -257, "neg -2^64": -(2**64),
    "empty bytes": b"", "bytes": bytes(range(30)), "empty text": "", "text": "bleota", "text unicode": "ü水🔥",
    "text 300": "x" * 300, "array": [1, [2, 3], [4, 5]], "empty array": [], "array 25": list(range(25)),
    "map": {"a": 1, "b": [2, 3]}, "empty map": {}, "int keys": {1: 2, 3: 4},
    "true": True, "false": False, "null": None, "undefined": cbor2.undefined,
    "tag 4000": cbor2.CBORTag(4000, "a"), "simple 16": cbor2.CBORSimpleValue(16),
    "smp image upload first chunk": {"image": 0, "len": 3072, "off": 0, "sha": bytes(range(32)),
                                     "data": bytes(range(256)) * 2, "upgrade": False},
    "smp image state response": {"images": [{"slot": 0, "version": "1.2.3", "hash": bytes(32),
                                             "bootable": True, "pending": False, "confirmed": True,
                                             "active": True, "permanent": False}], "splitStatus": 0},
    "smp v2 error": {"err": {"group": 1, "rc": 3}},
}

# Floats in their shortest exact form, as cbor2's canonical mode writes them
# (its default mode writes every finite float as a double; those are below).
floats = {
    "half 1.5": 1.5, "half -0.0": -0.0, "single 100000.0": 100000.0, "double 1.1": 1.1,
    "infinity": math.inf, "nan": math.nan, "half subnormal": 5.960464477539063e-08,
}

# Encodings only a decoder sees: indefinite lengths and over-long heads.
decode_only = {
    "indefinite bytes": "5f42010243030405ff",
    "indefinite text": "7f657374726561646d696e67ff",
    "indefinite array": "9f018202039f0405ffff",
    "indefinite map": "bf61610161629f0203ffff",
    "nested indefinite": "bf6346756ef563416d7421ff",
    "non-shortest uint": "1b0000000000000001",
    "non-shortest text length": "7800",
}

vectors = []
for name, value in values.items():
    encoded = cbor2.dumps(value)
    assert cbor2.loads(encoded) == value or name == "nan"
    vectors.append({"name": name, "hex": encoded.hex(), "value": typed(value), "canonical": True})
for name, value in floats.items():
    encoded = cbor2.dumps(value, canonical=True)
    vectors.append({"name": name, "hex": encoded.hex(), "value": typed(value), "canonical": True})
    if not math.isnan(value) and not math.isinf(value):
        vectors.append({"name": name + " as double", "hex": cbor2.dumps(value).hex(), "value": typed(value), "canonical": False})
for name, hex_text in decode_only.items():
    value = cbor2.loads(bytes.fromhex(hex_text))
    vectors.append({"name": name, "hex": hex_text, "value": typed(value), "canonical": False})

tool = f"cbor2-{version('cbor2')}"
out = Path(__file__).resolve().parent.parent / "Tests" / "BleotaCodecTests" / "Fixtures" / f"{tool}.json"
out.write_text(json.dumps({"tool": tool, "vectors": vectors}, indent=1) + "\n")
print(f"wrote {len(vectors)} vectors to {out}")
