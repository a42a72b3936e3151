#!/usr/bin/env python3
"""Seed inputs for the fuzz targets in Fuzz/, made from the project's own
fixtures and samples (Tests/*/Fixtures, Tests/BleotaATTTests' vectors,
scripts/native-vectors.py, samples/), cut down to a few hundred bytes each so
the fuzzer mutates small inputs. Standard library only; deterministic.

Run: python3 Fuzz/make-seeds.py OUTDIR   (scripts/fuzz does, into .build-fuzz/seeds)
Writes OUTDIR/<Target>/<name> files; the directory is replaced each time."""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = {}


def seed(target, name, data):
    SEEDS.setdefault(target, {})[name] = bytes(data)


def path(*parts):
    return os.path.join(ROOT, *parts)


def read(*parts):
    with open(path(*parts), "rb") as file:
        return file.read()


def chunks(data, size):
    """Length-prefixed pieces (the targets' InputCursor.chunk format)."""
    out = b""
    for start in range(0, len(data), size):
        piece = data[start:start + size]
        out += bytes([len(piece)]) + piece
    return out


# --- A minimal CBOR encoder for SMP requests the fixtures lack ---------------
def cbor(value):
    def head(major, n):
        if n < 24:
            return bytes([major << 5 | n])
        for info, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
            if n < 1 << (8 * struct.calcsize(fmt)):
                return bytes([major << 5 | info]) + struct.pack(fmt, n)
        raise ValueError(n)
    if value is True:
        return b"\xf5"
    if value is False:
        return b"\xf4"
    if isinstance(value, int):
        return head(0, value) if value >= 0 else head(1, -1 - value)
    if isinstance(value, bytes):
        return head(2, len(value)) + value
    if isinstance(value, str):
        return head(3, len(value.encode())) + value.encode()
    if isinstance(value, list):
        return head(4, len(value)) + b"".join(cbor(v) for v in value)
    if isinstance(value, dict):
        return head(5, len(value)) + b"".join(cbor(k) + cbor(v) for k, v in value.items())
    raise TypeError(value)


def smp(op, group, command, body, sequence=0, version=1):
    payload = cbor(body)
    return struct.pack(">BBHHBB", version << 3 | op, 0, len(payload), group, sequence, command) + payload


# --- CBOR and SMP, from the cbor2 and smp package vectors ---------------------
cbor_vectors = json.loads(read("Tests", "BleotaCodecTests", "Fixtures", "cbor2-6.3.0.json"))["vectors"]
for index, vector in enumerate(cbor_vectors):
    seed("FuzzCBOR", "cbor2-%03d" % index, bytes.fromhex(vector["hex"]))

smp_vectors = json.loads(read("Tests", "BleotaProtocolsTests", "Fixtures", "smp-4.2.0.json"))["vectors"]
requests = []
for index, vector in enumerate(smp_vectors):
    message = bytes.fromhex(vector["hex"])
    name = re.sub(r"[^a-z0-9]+", "-", vector["name"].lower())
    seed("FuzzSMPPacket", "smp-" + name, message)
    seed("FuzzCBOR", "smp-body-" + name, message[8:])
    serial = b"".join(bytes.fromhex(line) for line in vector["serial"])
    seed("FuzzSMPSerial", "smp-" + name, serial)
    if vector["op"] in (0, 2):
        requests.append(message)
# A console mixes log lines with frames; a frame's lines may end in CR LF.
seed("FuzzSMPSerial", "console", b"*** Booting Zephyr OS ***\n" + bytes.fromhex(smp_vectors[0]["serial"][0]).replace(b"\n", b"\r\n") + b"uart:~$ \n")

# The reassembler: the default limit (0) and a small one, packets of 20 and 7 bytes.
stream = b"".join(bytes.fromhex(v["hex"]) for v in smp_vectors[:6])
seed("FuzzSMPReassembler", "default-limit-20", b"\x00" + chunks(stream, 20))
seed("FuzzSMPReassembler", "small-limit-7", b"\x20" + chunks(stream, 7))
seed("FuzzSMPReassembler", "reset-between", b"\x00" + chunks(stream[:13], 13) + b"\x00" + chunks(stream, 64))

# The device: each request alone, all in order, and requests for the commands
# the fixtures do not show (file hash, erase, bootloader query, a fresh upload).
firmware = read("samples", "firmware", "blinky.bin")[:256]
for index, message in enumerate(requests):
    seed("FuzzSMPDevice", "request-%02d" % index, message)
seed("FuzzSMPDevice", "all-requests", b"".join(requests))
extra = [
    smp(0, 8, 2, {"name": "/lfs/hello.txt", "type": "sha256"}),
    smp(0, 8, 2, {"name": "/lfs/hello.txt", "off": 4, "len": 8}),
    smp(0, 8, 0, {"name": "/lfs/hello.txt", "off": 0}),
    smp(2, 8, 0, {"name": "/lfs/new.txt", "off": 0, "len": 3, "data": b"abc"}),
    smp(0, 0, 8, {"query": "mode"}),
    smp(0, 0, 6, {}),
    smp(2, 0, 0, {"d": "echo"}, version=0),
    smp(2, 1, 5, {"slot": 1}),
    smp(2, 1, 1, {"image": 0, "len": 64, "off": 0, "sha": hashlib.sha256(b"\x3d\xb8\xf3\x96" + bytes(60)).digest(),
                  "data": b"\x3d\xb8\xf3\x96" + bytes(28)}),
    smp(2, 1, 1, {"off": 32, "data": bytes(32)}),
    smp(0, 1, 0, {}),
    smp(2, 1, 0, {"confirm": True}),
]
for index, message in enumerate(extra):
    seed("FuzzSMPDevice", "command-%02d" % index, message)
seed("FuzzSMPDevice", "upload-then-state", b"".join(extra[8:]))

# --- ATT PDUs, from the byte layouts in the ATT tests --------------------------
att_source = read("Tests", "BleotaATTTests", "ATTPDUTests.swift").decode()
att_table = att_source[att_source.index("let attVectors"):att_source.index("@Suite")]
for index, text in enumerate(re.findall(r'"([0-9a-f ]+)"\)', att_table)):
    seed("FuzzATTPDU", "att-%02d" % index, bytes.fromhex(text))

# --- Management interface events (BlueZ doc/mgmt-api.txt layouts) -------------
def mgmt(code, parameters, index=0):
    return struct.pack("<HHH", code, index, len(parameters)) + parameters
peer = bytes([0x01, 0x00, 0x01, 0x01, 0xAA, 0x00, 0x01])
seed("FuzzManagementEvent", "command-complete", mgmt(0x0001, bytes([0x05, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00])))
seed("FuzzManagementEvent", "command-status", mgmt(0x0002, bytes([0x09, 0x00, 0x14])))
seed("FuzzManagementEvent", "new-ltk", mgmt(0x000A, b"\x01" + peer + bytes([0x03, 0x00, 0x10, 0, 0]) + bytes(8) + bytes(range(16))))
seed("FuzzManagementEvent", "confirm", mgmt(0x000F, peer + bytes([0x00, 0x40, 0xE2, 0x01, 0x00])))
seed("FuzzManagementEvent", "passkey", mgmt(0x0010, peer))
seed("FuzzManagementEvent", "auth-failed", mgmt(0x0011, peer + b"\x05"))
seed("FuzzManagementEvent", "new-irk", mgmt(0x0018, b"\x01" + bytes([0x11, 0x22, 0x33, 0x44, 0x55, 0x66]) + peer + bytes(16)))
seed("FuzzManagementEvent", "device-found", mgmt(0x0012, peer + bytes([0xC4]) + bytes(4) + struct.pack("<H", 3) + bytes([2, 1, 6])))

# --- Native messages, from the independent Python encoder's golden vectors ----
output = subprocess.run([sys.executable, path("scripts", "native-vectors.py")], check=True,
                        capture_output=True, text=True).stdout
native = {}
for line in output.splitlines():
    name, hex_text = line.split()
    native[name] = bytes.fromhex(hex_text)
for name, message in native.items():
    # Flag 0: the bytes as they are, CRC included; flag 1: the body, sealed by the target.
    seed("FuzzNativeMessage", "as-is-" + name, b"\x00" + message)
    seed("FuzzNativeMessage", "sealed-" + name, b"\x01" + message[:-2])


def sealed(body):
    """One packet for the reassembler and device targets: sealed by the target."""
    return b"\x01" + bytes([len(body)]) + body


def segments(message, chunk):
    """`message` (its own CRC included) as SEGMENT packets of `chunk` bytes each."""
    count = (len(message) + chunk - 1) // chunk
    return b"".join(sealed(bytes([0x14, i, count]) + message[i * chunk:(i + 1) * chunk]) for i in range(count))


hello_response = native["helloResponse"]
seed("FuzzNativeReassembler", "segments", b"\xe0" + sealed(native["segment"][:-2]))
seed("FuzzNativeReassembler", "hello-response-in-8", b"\x00" + segments(hello_response, 8))
seed("FuzzNativeReassembler", "mixed", b"\x10" + sealed(native["ack"][:-2]) + segments(hello_response, 12) + sealed(native["nack"][:-2]))

# --- A native session against the device: update, compressed update, file push -
image = read("samples", "firmware", "blinky.bin")[:600]


def start(target, data, stream, label, packet=200, compressed=False):
    return (bytes([0x03, target, 1 if compressed else 0]) + struct.pack("<III", len(data), len(stream), zlib.crc32(data))
            + hashlib.sha256(data).digest() + struct.pack("<HH", packet, 8) + bytes([len(label)]) + label.encode())


def data_packets(stream, packet=200):
    return b"".join(sealed(b"\x10" + struct.pack("<H", i) + stream[i * packet:(i + 1) * packet])
                    for i in range((len(stream) + packet - 1) // packet))


hello = sealed(b"\x01\x01\x01")
update = (hello + sealed(b"\x02") + sealed(start(0, image, image, "2.0.0")) + data_packets(image)
          + sealed(b"\x13") + sealed(b"\x05") + sealed(b"\x06") + hello)
seed("FuzzNativeDevice", "update", b"\xe0" + update)
deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
compressed = deflater.compress(image) + deflater.flush()
seed("FuzzNativeDevice", "compressed-update", b"\xe0" + hello + sealed(b"\x02")
     + sealed(start(0, image, compressed, "2.0.1", compressed=True)) + data_packets(compressed) + sealed(b"\x05"))
note = image[:100]
seed("FuzzNativeDevice", "file-push-and-get", b"\xe0" + hello + sealed(start(1, note, note, "notes.txt")) + data_packets(note)
     + sealed(b"\x05") + sealed(b"\x09\x09notes.txt" + struct.pack("<HHH", 100, 4, 8)) + sealed(b"\x11\x00\x00\x00"))
seed("FuzzNativeDevice", "resume-and-abort", b"\x00" + hello + sealed(b"\x02") + sealed(start(2, image, image, "t"))
     + data_packets(image[:200]) + sealed(b"\x04" + hashlib.sha256(image).digest()) + sealed(b"\x08"))
seed("FuzzNativeDevice", "vectors", b"\xe0" + b"".join(b"\x00" + bytes([len(m)]) + m for m in native.values()))

# --- Intel HEX and S-records: the samples' first records and their ends -------
hex_lines = read("samples", "firmware", "blinky.hex").splitlines(keepends=True)
seed("FuzzIntelHex", "blinky-start", b"".join(hex_lines[:4] + hex_lines[-2:]))
seed("FuzzIntelHex", "blinky-gap", b"".join(hex_lines[:2] + [l for l in hex_lines if l.startswith(b":20B0")][:2] + hex_lines[-2:]))


def ihex(kind, address, data):
    record = bytes([len(data), address >> 8, address & 0xFF, kind]) + data
    return b":" + (record + bytes([-sum(record) & 0xFF])).hex().upper().encode() + b"\n"


seed("FuzzIntelHex", "segment-addressing", ihex(2, 0, b"\x10\x00") + hex_lines[0].replace(b"\r", b"")
     + ihex(3, 0, b"\x10\x00\x01\x00") + ihex(4, 0, b"\x00\x01") + ihex(0, 0xFFF0, bytes(32)) + ihex(1, 0, b""))

srec_lines = read("samples", "firmware", "blinky.srec").splitlines(keepends=True)


def srec(kind, address, width, data):
    body = bytes([width + len(data) + 1]) + address.to_bytes(width, "big") + data
    return b"S%d" % kind + (body + bytes([~sum(body) & 0xFF])).hex().upper().encode() + b"\n"


seed("FuzzSRecord", "blinky-start", b"".join(srec_lines[:4]) + srec(5, 3, 2, b"") + srec_lines[-1])
seed("FuzzSRecord", "widths", srec(0, 0, 2, b"hdr") + srec(1, 0x10, 2, b"ab") + srec(2, 0x10000, 3, b"cd")
     + srec(6, 2, 3, b"") + srec(8, 0x10000, 3, b""))
seed("FuzzSRecord", "s9", srec(1, 0, 2, bytes(range(16))) + srec(9, 0, 2, b""))

# --- MCUboot: each sample's header and TLVs around a short firmware -----------
def tlv_area(magic, entries):
    body = b"".join(struct.pack("<HH", kind, len(value)) + value for kind, value in entries)
    return struct.pack("<HH", magic, 4 + len(body)) + body


for name in sorted(os.listdir(path("samples", "mcuboot", "imgtool-2.5.0"))):
    if not name.endswith(".bin"):
        continue
    sample = read("samples", "mcuboot", "imgtool-2.5.0", name)
    magic, load, header_size, protected_size, image_size, flags = struct.unpack_from("<IIHHII", sample)
    offset, tlvs = header_size + image_size, []
    magic_area, area_size = struct.unpack_from("<HH", sample, offset)
    at = offset + 4
    while at < offset + area_size:
        kind, length = struct.unpack_from("<HH", sample, at)
        tlvs.append((kind, sample[at + 4:at + 4 + length]))
        at += 4 + length
    body = sample[header_size:header_size + 128]
    for variant, new_header in (("", header_size), ("-short-header", 32)):
        for protected in ((), ((0x50, struct.pack("<I", 1)),)):
            area = tlv_area(0x6908, protected) if protected else b""
            header = struct.pack("<IIHHII", magic, load, new_header, len(area), len(body), flags) + sample[20:32]
            hashed = header + b"\xff" * (new_header - 32) + body + area
            digest = hashlib.sha256(hashed).digest()
            tail = tlv_area(0x6907, [(k, digest if k == 0x10 else v) for k, v in tlvs])
            label = name[:-4] + variant + ("-protected" if protected else "")
            seed("FuzzMCUboot", label, hashed + tail)

# Nordic DFU: the protoc-encoded init packet fixture, a signed-looking variant,
# and a package (zip) around it as nrfutil lays one out.
import io, json, zipfile
nordic_dat = read("Tests", "BleotaProtocolsTests", "Fixtures", "nordic", "protoc-3.21.12-unsigned-app.dat")
seed("FuzzNordicInitPacket", "protoc-unsigned-app", nordic_dat)
command = nordic_dat[2:]  # the Command message inside field 1
signed = b"\x0a" + bytes([len(command)]) + command + b"\x10\x00\x1a\x40" + bytes(range(64))
seed("FuzzNordicInitPacket", "signed-shape", b"\x12" + bytes([len(signed)]) + signed)
def package(manifest, members):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", json.dumps({"manifest": manifest}))
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()
seed("FuzzNordicPackage", "secure-app", package({"application": {"bin_file": "app.bin", "dat_file": "app.dat"}},
                                                {"app.bin": bytes(range(256)) * 4, "app.dat": nordic_dat}))
seed("FuzzNordicPackage", "legacy-app", package({"application": {"bin_file": "a.bin", "dat_file": "a.dat"}, "dfu_version": 0.5},
                                                {"a.bin": b"\x01" * 100, "a.dat": b"\x52\x00\xff\xff\x01\x00\x00\x00\x01\x00\xfe\xff\x34\x12"}))

# The Nordic bootloaders: a whole Secure DFU flow (receipts off, the init packet, one object)
# as records [kind, length, bytes], then a legacy flow; serial frames and answers.
def record(kind, data):
    return bytes([kind, len(data)]) + data
flow = record(0, b"\x02\x00\x00") + record(0, b"\x01\x01" + len(nordic_dat).to_bytes(4, "little"))
flow += record(1, nordic_dat) + record(0, b"\x03") + record(0, b"\x04") + record(0, b"\x06\x02")
flow += record(0, b"\x01\x02" + (4096).to_bytes(4, "little"))
for start in range(0, 4096, 244):
    flow += record(1, bytes(range(256))[: min(244, 4096 - start)])
flow += record(0, b"\x03") + record(0, b"\x04") + record(4, b"") + record(0, b"\x06\x01")
seed("FuzzNordicBootloaders", "secure-flow", flow)
legacy_init = b"\x52\x00\xff\xff\x02\x00\x00\x00\x01\x00\xb6\x00\x00\x00"
legacy = record(0, b"\x01\x04") + record(1, (0).to_bytes(4, "little") * 2 + (16).to_bytes(4, "little"))
legacy += record(0, b"\x02\x00") + record(1, legacy_init) + record(0, b"\x02\x01") + record(0, b"\x08\x01\x00")
legacy += record(0, b"\x03") + record(1, b"\x01" * 16) + record(0, b"\x04") + record(0, b"\x05") + record(0, b"\x07")
seed("FuzzNordicBootloaders", "legacy-flow", legacy)
seed("FuzzNordicSerial", "hci-start", bytes.fromhex("d14e01e003000000040000000000000000000000347500008b7a"))
seed("FuzzNordicSerial", "slip-escapes", b"\x60\x06\x01\xdb\xdc\x00\x10\x00\x00\xdb\xdd\x00\x00\x00\x00\x00\x00\x00")
seed("FuzzNordicSerial", "legacy-receipt", b"\x11\xd0\x07\x00\x00")
seed("FuzzNordicSerial", "legacy-init", legacy_init)
for name in sorted(os.listdir(path("protocols"))):
    if name.endswith(".yaml"):
        seed("FuzzProtocolDescription", name, read("protocols", name))
seed("FuzzProtocolDescription", "minimal", b"bleota-protocol: 1\nname: m\nservice: 1234\ncharacteristics: {d: {uuid: 1235, write: command}}\n"
     b"messages: {d: {characteristic: d, fields: [{u16: index}, payload, {crc16: modbus}]}, e: {characteristic: d, fields: [{bytes: \"02\"}]}}\n"
     b"update: {end: {send: e}}\ntransfer: {packet: d, flow: {mode: none}}\n")


def xmodem(data):
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def espressif(body):
    body = body.ljust(18, b"\0")
    return body + struct.pack("<H", xmodem(body))


seed("FuzzVendorMessages", "esp-start", espressif(b"\x01\x00" + struct.pack("<I", 20000)))
seed("FuzzVendorMessages", "esp-stop", espressif(b"\x02\x00"))
seed("FuzzVendorMessages", "esp-ack", espressif(b"\x03\x00\x01\x00\x00\x00\x03"))
seed("FuzzVendorMessages", "esp-sector-ack", espressif(b"\x05\x00\x02\x00\x04\x00"))
seed("FuzzVendorMessages", "esp-last-packet", b"\x01\x00\xff" + bytes(range(20)) + b"\x34\x12")
seed("FuzzVendorMessages", "esp-image", read("samples", "espressif", "esp-app-sample.bin")[:300])
seed("FuzzVendorMessages", "suota-header", read("samples", "suota", "da1469x-app-sample.img")[:64])
seed("FuzzVendorMessages", "suota-mem-dev", b"\x00\x00\x00\x13")
seed("FuzzVendorMessages", "ti-oad-header", read("samples", "ti-oad", "cc26x2-app-sample_oad.bin")[:120])
seed("FuzzVendorMessages", "ti-oad-request", b"\x12\x00\x05\x00\x00\x00")
def gbl(program):
    tags = struct.pack("<II", 0x03A617EB, 8) + struct.pack("<II", 0x03000000, 0)
    tags += struct.pack("<II", 0xF40A0AF4, 28) + struct.pack("<III", 1, 2, 0) + bytes(16)
    tags += struct.pack("<II", 0xFE0101FE, 4 + len(program)) + struct.pack("<I", 0) + program
    tags += struct.pack("<II", 0xFC0404FC, 4)
    return tags + struct.pack("<I", zlib.crc32(tags))


seed("FuzzVendorMessages", "silabs-gbl", gbl(bytes(range(32))))


def delta_size(value):
    """detools' variable-length size (protocols/delta.md)."""
    if value == 0:
        return b"\x00"
    magnitude = abs(value)
    out = [(0x40 if value < 0 else 0) | (magnitude & 0x3F)]
    magnitude >>= 6
    while magnitude:
        out[-1] |= 0x80
        out.append(magnitude & 0x7F)
        magnitude >>= 7
    return bytes(out)


def delta_case(base, chunks, new_size, compression=0):
    """A FuzzDeltaPatch input: the base's length, the base, then a sequential patch of `chunks`
    (diff, extra, adjustment), uncompressed or as heatshrink literals only."""
    body = delta_size(0)
    for diff, extra, adjustment in chunks:
        body += delta_size(len(diff)) + diff + delta_size(len(extra)) + extra + delta_size(adjustment)
    if compression == 4:
        bits = "".join("1" + format(byte, "08b") for byte in body)
        bits += "0" * (-len(bits) % 8)
        body = b"\x44" + bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
    return struct.pack(">H", len(base)) + base + bytes([compression]) + delta_size(new_size) + body


seed("FuzzDeltaPatch", "none-one-change", delta_case(b"hello world", [(bytes(6), b"there", 0)], 11))
seed("FuzzDeltaPatch", "heatshrink-literals", delta_case(b"abcdefgh", [(bytes(4), b"XY", 2), (bytes(2), b"", 0)], 8, 4))
seed("FuzzDeltaPatch", "backwards", delta_case(bytes(range(32)), [(bytes(8), b"", -8), (bytes(8), b"!", 0)], 17))
seed("FuzzDeltaPatch", "empty-new", b"\x00\x02ab\x04\x00")
seed("FuzzDeltaPatch", "esp-header", b"\x00\x01z" + (0xFCCDDE10).to_bytes(4, "little") + hashlib.sha256(b"z").digest() + bytes(28)
     + b"\x00" + delta_size(1) + delta_size(0) + delta_size(1) + b"\x01" + delta_size(0) + delta_size(0))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make-seeds.py OUTDIR")
    out = sys.argv[1]
    shutil.rmtree(out, ignore_errors=True)
    for target, files in sorted(SEEDS.items()):
        os.makedirs(os.path.join(out, target))
        for name, data in files.items():
            with open(os.path.join(out, target, name), "wb") as file:
                file.write(data)
    print("seeds: " + ", ".join("%s %d" % (t, len(f)) for t, f in sorted(SEEDS.items())))
