#!/usr/bin/env bash
# Makes GBL files with Silicon Labs' own tool, as fixtures for bleota's GBL
# reader, into Tests/BleotaProtocolsTests/Fixtures/silabs/.
#
# The tool is Simplicity Commander (CLI), which Silicon Labs publishes on PyPI
# inside `silabs-pycommander-cli` (the wheel carries the Linux executable; the
# wrapper unpacks it into its cache on first use). This script installs it into
# a throwaway virtualenv, writes a tiny synthetic application image (a Cortex-M
# vector table whose word 13 points at an ApplicationProperties_t, as the Gecko
# SDK's application_properties.h lays it out: magic, struct version 0x0101,
# no signature, app type 0x20 APPLICATION_TYPE_BLUETOOTH_APP, version 7,
# capabilities 0, product ID A0..AF), and runs `gbl create` on it:
#
#   commander-<version>-app.gbl            --app (plain)
#   commander-<version>-app-dep-geq5.gbl   --app --dep-app geq:5 (version dependency tag)
#   commander-<version>-app-lz4.gbl        --app --compress lz4
#   commander-<version>-app-lzma.gbl       --app --compress lzma
#   commander-<version>-app-encrypted.gbl  --app --encrypt KEY (a key made by `gbl keygen`
#                                          in the temporary directory and thrown away)
#
# All but the encrypted file come out the same on every run; the encrypted one
# has a random key and nonce, so commit one run. Nothing the script downloads
# is kept: only the tool's output and the input image it wrote.
#
#   scripts/silabs-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=Tests/BleotaProtocolsTests/Fixtures/silabs
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "silabs-pycommander-cli==1.3.0"
export XDG_CACHE_HOME="$work/cache"
commander="$work/venv/bin/pycommander-cli"
version=$("$commander" --version | sed -n 's/^Simplicity Commander //p')
[ -n "$version" ] || { echo "could not read Simplicity Commander's version" >&2; exit 1; }

python3 - "$out/silabs-app.hex" <<'EOF'
import struct, sys

image = bytearray(0x40)
struct.pack_into("<I", image, 0x00, 0x20001000)   # initial stack pointer
struct.pack_into("<I", image, 0x04, 0x00000081)   # reset handler (Thumb)
struct.pack_into("<I", image, 13 * 4, 0x00000040) # word 13: where ApplicationProperties_t is
magic = bytes([0x13, 0xB7, 0x79, 0xFA, 0xC9, 0x25, 0xDD, 0xB7, 0xAD, 0xF3, 0xCF, 0xE0, 0xF1, 0xB6, 0x14, 0xB8])
image += magic
image += struct.pack("<III", 0x0101, 0, 0)        # structVersion, signatureType, signatureLocation
image += struct.pack("<III", 0x20, 7, 0)          # app.type, app.version, app.capabilities
image += bytes(range(0xA0, 0xB0))                 # app.productId
image += struct.pack("<II", 0, 0)                 # cert, longTokenSectionAddress
image += bytes([0x70, 0x47, 0xFE, 0xE7])          # bx lr; b .

def record(kind, address, data=b""):
    raw = bytes([len(data), (address >> 8) & 0xFF, address & 0xFF, kind]) + data
    return ":" + (raw + bytes([-sum(raw) & 0xFF])).hex().upper() + "\n"

lines = [record(0x04, 0, b"\x00\x00")]
lines += [record(0x00, offset, bytes(image[offset:offset + 16])) for offset in range(0, len(image), 16)]
lines.append(record(0x01, 0))
with open(sys.argv[1], "w", newline="\n") as f:
    f.writelines(lines)
EOF

app="$out/silabs-app.hex"
"$commander" gbl create "$out/commander-$version-app.gbl" --app "$app"
"$commander" gbl create "$out/commander-$version-app-dep-geq5.gbl" --app "$app" --dep-app geq:5
"$commander" gbl create "$out/commander-$version-app-lz4.gbl" --app "$app" --compress lz4
"$commander" gbl create "$out/commander-$version-app-lzma.gbl" --app "$app" --compress lzma
"$commander" gbl keygen --type aes-ccm -o "$work/aes-key.txt"
"$commander" gbl create "$out/commander-$version-app-encrypted.gbl" --app "$app" --encrypt "$work/aes-key.txt"
ls -l "$out"
