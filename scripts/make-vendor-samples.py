#!/usr/bin/env python3
"""Wraps samples/firmware/blinky.bin (real Cortex-M code) in the containers three
vendors' bootloaders check, so bleota's vendor protocols have images to flash in
tests, the VM and the README. These are not builds of the vendors' SDKs: they
carry exactly what the devices (and bleota's simulated devices) check.

  samples/espressif/esp-app-sample.bin   ESP-IDF app header (magic 0xE9, hash_appended),
                                         checksum byte padded to 16, SHA-256 appended
  samples/telink/telink-app-sample.bin   5D 02 at 6, "KNLT" at 8, size at 0x18, CRC-32
                                         without final XOR appended (pvvx's tl_check_fw.py rules)
  samples/stm32wb/stm32wb-app-sample.bin pointer at 0x140 to the magic 0x94448A29 at the end,
                                         the application linked at 0x08007000
  samples/ti-oad/cc26x2-app-sample_oad.bin  TI OAD header ("CC26x2R1", BIM 3, metadata 1,
                                         application, CRC-32 from offset 12), a contiguous segment
  samples/suota/da1469x-app-sample.img   DA1469x mkimage layout: "Qq", code size, CRC-32 of the
                                         code, version "2.0.0", timestamp, the code at 0x400
  samples/suota/da1469x-app-sample-v3.img  the same, version "3.0.0" (a second update in a row)
  samples/silabs/efr32-app-sample.gbl    GBL v3 as `commander gbl create --app` lays it out: header
                                         tag, application tag (version 2), one program tag at
                                         0x00000000, end tag with the CRC-32 of everything before

Run from the repository root: python3 scripts/make-vendor-samples.py
"""
import hashlib
import os
import struct
import zlib

root = os.path.join(os.path.dirname(__file__), "..")
content = open(os.path.join(root, "samples/firmware/blinky.bin"), "rb").read()


def write(path, data):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as handle:
        handle.write(data)
    print(f"{path}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")


# ESP-IDF: a 24-byte header (magic, one segment, hash_appended = 1), the code, the checksum
# byte ending on a 16-byte boundary, then the SHA-256 of everything before it.
header = bytearray(24)
header[0] = 0xE9
header[1] = 1
header[23] = 1
esp = bytearray(header) + content
while (len(esp) + 1) % 16:
    esp.append(0)
checksum = 0xEF
for byte in content:
    checksum ^= byte
esp.append(checksum)
esp += hashlib.sha256(esp).digest()
write("samples/espressif/esp-app-sample.bin", bytes(esp))

# Telink: the firmware-check flag, the boot mark, the size (with the CRC), padding to 16, the CRC.
telink = bytearray(content[:0x20] if len(content) >= 0x20 else content.ljust(0x20, b"\xff")) + content[0x20:]
telink[6:8] = b"\x5d\x02"
telink[8:12] = b"KNLT"
while len(telink) % 16:
    telink.append(0xFF)
telink[0x18:0x1C] = struct.pack("<I", len(telink) + 4)
telink += struct.pack("<I", zlib.crc32(bytes(telink)) ^ 0xFFFFFFFF)
write("samples/telink/telink-app-sample.bin", bytes(telink))

# STM32WB: the code, the magic word at its end, a pointer to it at offset 0x140.
wb = bytearray(content.ljust(0x144, b"\xff"))
while len(wb) % 4:
    wb.append(0xFF)
wb[0x140:0x144] = struct.pack("<I", 0x08007000 + len(wb))
wb += struct.pack("<I", 0x94448A29)
write("samples/stm32wb/stm32wb-app-sample.bin", bytes(wb))

# DA1469x (SDK10 suota.h): "Qq", size, CRC-32 of the code, version[16], timestamp, pointer_to_ivt;
# the header extension up to the code at 0x400.
for version, timestamp, name in ((b"2.0.0", 2, "da1469x-app-sample.img"), (b"3.0.0", 3, "da1469x-app-sample-v3.img")):
    header = b"Qq" + struct.pack("<II", len(content), zlib.crc32(content)) + version.ljust(16, b"\0") + struct.pack("<II", timestamp, 0x400)
    write("samples/suota/" + name, header.ljust(0x400, b"\xff") + content)

# TI OAD (oad_image_header.h): the 44-byte fixed header, a contiguous-payload segment, the code;
# the CRC-32 (zlib) over offset 12 to the end, stored at 8.
oad = bytearray(44)
oad[0:8] = b"CC26x2R1"
oad[12], oad[13] = 3, 1
oad[14:16] = b"\xfe\xff"
oad[16], oad[17], oad[18], oad[19] = 0xFF, 0xFF, 1, 0
oad[32:36] = b"0002"
oad[40] = 44
oad += bytes([0x01, 0xFE, 0xFF, 0xFF]) + struct.pack("<II", 12 + len(content), 0) + content
oad[24:28] = struct.pack("<I", len(oad))
oad[36:40] = struct.pack("<I", len(oad) - 1)
oad[8:12] = struct.pack("<I", zlib.crc32(bytes(oad[12:])))
write("samples/ti-oad/cc26x2-app-sample_oad.bin", bytes(oad))

# Silicon Labs GBL v3: tags of (id u32, length u32, value); the end tag's CRC-32 covers the file
# from its first byte through the end tag's 8-byte header.
def gbl_tag(tag, value):
    return struct.pack("<II", tag, len(value)) + value


gbl = gbl_tag(0x03A617EB, struct.pack("<II", 0x03000000, 0))
gbl += gbl_tag(0xF40A0AF4, struct.pack("<III", 1, 2, 0) + bytes(16))
gbl += gbl_tag(0xFE0101FE, struct.pack("<I", 0) + content)
gbl += struct.pack("<II", 0xFC0404FC, 4)
gbl += struct.pack("<I", zlib.crc32(gbl))
write("samples/silabs/efr32-app-sample.gbl", gbl)
