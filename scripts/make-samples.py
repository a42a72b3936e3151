#!/usr/bin/env python3
"""Generates bleota's sample firmware images, deterministically.

Written independently of bleota's Swift code (standard library only), so the
test suite cross-checks bleota's parsers and writers against a second
implementation of Intel HEX and Motorola S-record. Re-run it to regenerate:

    python3 scripts/make-samples.py

and commit the result; the files are byte-for-byte reproducible.
"""
import hashlib
import json
import os
import random
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "samples", "firmware")


def cortex_m_image(rng, size, base, reset_offset):
    """A plausible Cortex-M application: vector table, then code-like bytes."""
    stack_top = 0x20010000
    reset = base + reset_offset | 1  # Thumb bit
    vectors = struct.pack("<II", stack_top, reset)
    vectors += b"".join(struct.pack("<I", base + 0x200 + 4 * i | 1) for i in range(46))
    body = bytes(rng.getrandbits(8) for _ in range(size - len(vectors)))
    return vectors + body


def ihex_record(rtype, address, data):
    record = bytes([len(data), (address >> 8) & 0xFF, address & 0xFF, rtype]) + data
    checksum = (-sum(record)) & 0xFF
    return ":" + (record + bytes([checksum])).hex().upper() + "\n"


def write_ihex(path, segments, start):
    lines = []
    upper = 0
    for address, data in segments:
        offset = 0
        while offset < len(data):
            here = address + offset
            if here >> 16 != upper:
                upper = here >> 16
                lines.append(ihex_record(4, 0, struct.pack(">H", upper)))
            length = min(32, len(data) - offset, 0x10000 - (here & 0xFFFF))
            lines.append(ihex_record(0, here & 0xFFFF, data[offset:offset + length]))
            offset += length
    lines.append(ihex_record(5, 0, struct.pack(">I", start)))
    lines.append(ihex_record(1, 0, b""))
    with open(path, "w", newline="\r\n") as f:  # CRLF, as most toolchains emit
        f.write("".join(lines))


def srec_record(rtype, address, width, data):
    body = bytes([width + len(data) + 1]) + address.to_bytes(width, "big") + data
    checksum = (~sum(body)) & 0xFF
    return "S%d" % rtype + (body + bytes([checksum])).hex().upper() + "\n"


def write_srec(path, segments, start):
    lines = [srec_record(0, 0, 2, b"blinky sample")]
    count = 0
    for address, data in segments:
        for offset in range(0, len(data), 28):
            lines.append(srec_record(3, address + offset, 4, data[offset:offset + 28]))
            count += 1
    lines.append(srec_record(5, count, 2, b""))
    lines.append(srec_record(7, start, 4, b""))
    with open(path, "w") as f:
        f.write("".join(lines))


def flatten(segments, fill=0xFF):
    base = segments[0][0]
    end = max(a + len(d) for a, d in segments)
    out = bytearray([fill]) * (end - base)
    for address, data in segments:
        out[address - base:address - base + len(data)] = data
    return bytes(out)


def describe(data):
    return {"size": len(data), "crc32": "0x%08x" % (zlib.crc32(data) & 0xFFFFFFFF),
            "sha256": hashlib.sha256(data).hexdigest()}


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(20261122)
    base = 0x00008000
    app = cortex_m_image(rng, 10 * 1024, base, 0x100)
    settings = bytes(rng.getrandbits(8) for _ in range(1024))
    # Application at 0x8000 and a settings block at 0xB000: a 2 KiB gap between.
    segments = [(base, app), (0x0000B000, settings)]
    start = base + 0x100 | 1
    write_ihex(os.path.join(OUT, "blinky.hex"), segments, start)
    write_srec(os.path.join(OUT, "blinky.srec"), segments, start)
    flat = flatten(segments)
    with open(os.path.join(OUT, "blinky.bin"), "wb") as f:
        f.write(flat)
    v2 = cortex_m_image(random.Random(2), 48 * 1024, 0, 0x100)
    with open(os.path.join(OUT, "app-v2.bin"), "wb") as f:
        f.write(v2)
    summary = {
        "blinky": dict(describe(flat), baseAddress=base, startAddress=start,
                       segments=[{"address": a, "length": len(d)} for a, d in segments]),
        "app-v2": dict(describe(v2), baseAddress=0, segments=[{"address": 0, "length": len(v2)}]),
    }
    with open(os.path.join(OUT, "checksums.json"), "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
