#!/usr/bin/env bash
# Builds Nordic DFU packages with the vendors' own tools, as fixtures for
# bleota's package and init-packet readers, into
# Tests/BleotaProtocolsTests/Fixtures/nordic/:
# - Secure DFU zips (protobuf init packets) from nrfutil 6.1.7: an application
#   unsigned and signed, a signed bootloader, and a signed SoftDevice +
#   bootloader + application package, with `nrfutil pkg display`'s decoding of
#   each next to it;
# - a legacy DFU zip (dfu_version 0.5, CRC-16 init packet) from
#   adafruit-nrfutil 0.5.3.post16, of the same application.
# The images are synthetic and made here, deterministically (SHA-256 counter
# stream, no proprietary SoftDevice or bootloader): nordic-app.hex,
# nordic-bootloader.hex, nordic-softdevice.hex. The signing key is a test key
# made by `nrfutil keys generate` on the first run and reused afterwards.
# Unsigned .bin/.dat members come out the same on every run; ECDSA signatures
# are randomised, and the zips hold file times, so commit one run.
#
#   scripts/nordic-fixtures.sh      # installs the tools with scripts/nordic-tools first
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$(scripts/nordic-tools)
nrfutil=$(sed -n 's/^nrfutil=//p' <<<"$tools")
adafruit=$(sed -n 's/^adafruit-nrfutil=//p' <<<"$tools")
nrfutil_version=$("$nrfutil" version | sed -n 's/^nrfutil version //p')
adafruit_version=$("$adafruit" version | sed -n 's/^adafruit-nrfutil version //p')
out=Tests/BleotaProtocolsTests/Fixtures/nordic
mkdir -p "$out"
rm -f "$out"/nrfutil-*.zip "$out"/nrfutil-*.display.txt "$out"/adafruit-nrfutil-*.zip "$out"/nordic-*.hex

# The images. Each starts with a Cortex-M vector table (initial stack pointer,
# then Thumb handler addresses) followed by pseudo-random bytes, and is written
# as Intel HEX with 16-byte records, extended linear address records and, for
# the application and bootloader, a start linear address (the reset handler).
python3 - "$out" <<'EOF'
import hashlib, struct, sys

out = sys.argv[1]

def stream(label, size):
    data = b"".join(hashlib.sha256(f"{label}:{i}".encode()).digest() for i in range((size + 31) // 32))
    return data[:size]

def cortex_m(label, base, size):
    vectors = struct.pack("<II", 0x20010000, (base + 0x200) | 1)
    vectors += b"".join(struct.pack("<I", (base + 0x300 + 4 * i) | 1) for i in range(46))
    return vectors + stream(label, size - len(vectors))

def record(kind, address, data=b""):
    raw = bytes([len(data), (address >> 8) & 0xFF, address & 0xFF, kind]) + data
    return ":" + (raw + bytes([-sum(raw) & 0xFF])).hex().upper() + "\n"

def write_hex(name, segments, start=None):
    lines, upper = [], None
    for base, data in segments:
        for offset in range(0, len(data), 16):
            address = base + offset
            if address >> 16 != upper:
                upper = address >> 16
                lines.append(record(0x04, 0, struct.pack(">H", upper)))
            lines.append(record(0x00, address & 0xFFFF, data[offset:offset + 16]))
    if start is not None:
        lines.append(record(0x05, 0, struct.pack(">I", start)))
    lines.append(record(0x01, 0))
    with open(f"{out}/{name}", "w", newline="\n") as f:
        f.writelines(lines)

# Application: 30 001 bytes at 0x26000 (where applications start above S132
# 7.x, FWID 0x0101); not a multiple of 4, so the tools pad the .bin to 30 004.
app_base = 0x26000
write_hex("nordic-app.hex", [(app_base, cortex_m("bleota nordic app", app_base, 30001))], (app_base + 0x200) | 1)

# Bootloader: 12 KiB at 0x78000 (nRF52832, SDK 17), plus the two UICR words a
# bootloader hex carries (bootloader start address, MBR parameter page), which
# nrfutil drops when it makes the .bin.
bl_base = 0x78000
uicr = struct.pack("<II", bl_base, 0x7E000)
write_hex("nordic-bootloader.hex",
          [(bl_base, cortex_m("bleota nordic bootloader", bl_base, 12 * 1024)), (0x10001014, uicr)],
          (bl_base + 0x200) | 1)

# SoftDevice stand-in: a 256-byte MBR stand-in at 0 (nrfutil drops everything
# below 0x1000) and 16 KiB from 0x1000 to 0x5000, with an info structure at
# 0x3000 laid out as in Nordic's SoftDevices: size byte 0x2C, magic
# 0x51B1E5DB, end address 0x5000, FWID 0x0124, SD id 132, version 7.3.0
# (7 003 000). Its content is pseudo-random, not a SoftDevice.
sd = bytearray(stream("bleota nordic softdevice", 0x4000))
sd[0x2000:0x2018] = struct.pack("<IIIIII", 0xFFFFFF2C, 0x51B1E5DB, 0x5000, 0xFFFF0124, 132, 7003000)
write_hex("nordic-softdevice.hex", [(0x0000, stream("bleota nordic mbr", 256)), (0x1000, bytes(sd))])
EOF

key=nrfutil-$nrfutil_version-test-key.pem
(
    cd "$out"
    [ -f "$key" ] || "$nrfutil" keys generate "$key"
    "$nrfutil" keys display --key pk --format pem --out_file "nrfutil-$nrfutil_version-test-key-public.pem" "$key"

    secure() { # NAME ARGS...: one nrfutil package and its decoding
        local zip=nrfutil-$nrfutil_version-$1.zip
        shift
        "$nrfutil" pkg generate --hw-version 52 --sd-req 0x0101 "$@" "$zip" | sed '/^|/d;/^$/d' # drops the no-key banner
        "$nrfutil" pkg display "$zip" > "${zip%.zip}.display.txt"
    }
    secure app-unsigned --application-version 2 --application nordic-app.hex
    secure app-signed --application-version 2 --application nordic-app.hex --key-file "$key"
    secure bootloader-signed --bootloader-version 2 --bootloader nordic-bootloader.hex --key-file "$key"
    secure sd-bl-app-signed --sd-id 0x0124 --softdevice nordic-softdevice.hex --bootloader-version 2 \
        --bootloader nordic-bootloader.hex --application-version 2 --application nordic-app.hex --key-file "$key"

    "$adafruit" dfu genpkg --dev-type 0x0052 --sd-req 0x00B6 --application-version 2 --application nordic-app.hex \
        "adafruit-nrfutil-$adafruit_version-app.zip"
)

for zip in "$out"/nrfutil-*.zip "$out"/adafruit-nrfutil-*.zip; do
    echo "== $zip"
    unzip -l "$zip"
    unzip -p "$zip" manifest.json
    echo
    if [ -f "${zip%.zip}.display.txt" ]; then
        grep -E 'Image count|Type:|Image file|- (signature_type|fw_version|hw_version|sd_req|type|sd_size|bl_size|app_size|boot_validation_type)[: ]' \
            "${zip%.zip}.display.txt"
    fi
done
