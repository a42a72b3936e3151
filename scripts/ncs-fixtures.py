#!/usr/bin/env python3
"""MCUboot images in the shapes nRF Connect SDK builds make, and the packages it zips them in.

The images are signed by imgtool (MCUboot's own tool, from PyPI): LZMA2-compressed with the ARM
Thumb filter, encrypted (ECIES-P256 with AES-128; X25519 with AES-256), with a dependency on
another image and a security counter, and direct-XIP pairs built for each slot (ROM_FIXED).

The packages (`dfu_application.zip`) are made by this script, not by nRF Connect SDK: their
`manifest.json` follows the schema of sdk-nrf's `scripts/bootloader/generate_zip.py` and the
file names of `cmake/sysbuild/zip.cmake` (sysbuild) and of `modules/mcuboot/CMakeLists.txt`
(before sysbuild): keys given as strings unless they start with 0x, `size` and `modtime` as
numbers, `format-version` 1 for sysbuild and 0 before it.

Private keys are made fresh each run and thrown away; public keys, the images, the packages and
what imgtool reads back are written to samples/mcuboot/imgtool-VERSION-ncs/.

    python3 -m venv .build-venv && .build-venv/bin/pip install imgtool==2.5.0
    IMGTOOL=.build-venv/bin/imgtool scripts/ncs-fixtures.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
imgtool = os.environ.get("IMGTOOL", os.path.join(root, ".build-venv/bin/imgtool"))
version = subprocess.run([imgtool, "version"], check=True, capture_output=True, text=True).stdout.strip()
out = os.path.join(root, f"samples/mcuboot/imgtool-{version}-ncs")
firmware = os.path.join(root, "samples/firmware")
cortex = os.path.join(root, "samples/cortex-m/gcc-arm-none-eabi-12.2.1/delta")
# The time every package says it was made, so that a rerun with the same images gives the same zip.
made = 1764547200

# The simulated direct-XIP device's slots (flash offsets), which ROM_FIXED names.
XIP_SLOTS = {0: 0x0000C000, 1: 0x00082000}

shutil.rmtree(out, ignore_errors=True)
os.makedirs(out)
keys = tempfile.mkdtemp()


def run(*arguments):
    return subprocess.run([imgtool, *arguments], check=True, capture_output=True, text=True).stdout


def sign(key, image_version, source, name, *extra, slot_size="0x80000"):
    target = os.path.join(out, name)
    run("sign", "--key", key, "--header-size", "0x200", "--pad-header", "--align", "4", "--slot-size", slot_size,
        "--version", image_version, *extra, source, target)
    return target


try:
    p256 = os.path.join(keys, "p256.pem")
    ed25519 = os.path.join(keys, "ed25519.pem")
    enc_p256 = os.path.join(keys, "enc-p256.pem")
    enc_x25519 = os.path.join(keys, "enc-x25519.pem")
    run("keygen", "-k", p256, "-t", "ecdsa-p256")
    run("keygen", "-k", ed25519, "-t", "ed25519")
    run("keygen", "-k", enc_p256, "-t", "ecdsa-p256")
    run("keygen", "-k", enc_x25519, "-t", "x25519")
    for key, name in [(p256, "ecdsa-p256.pub.pem"), (ed25519, "ed25519.pub.pem"), (enc_p256, "encryption-p256.pub.pem"),
                      (enc_x25519, "encryption-x25519.pub.pem")]:
        with open(os.path.join(out, name), "w") as handle:
            handle.write(run("getpub", "-k", key, "-e", "pem"))
    blinky = os.path.join(firmware, "blinky.bin")
    images = {
        "blinky-1.1.0-lzma2armthumb-ecdsa-p256.bin": (p256, sign(p256, "1.1.0", blinky, "blinky-1.1.0-lzma2armthumb-ecdsa-p256.bin",
                                                              "--compression", "lzma2armthumb")),
        "blinky-1.1.0-encrypted-aes128-ecies-p256.bin": (p256, sign(p256, "1.1.0", blinky, "blinky-1.1.0-encrypted-aes128-ecies-p256.bin",
                                                                "--encrypt", os.path.join(out, "encryption-p256.pub.pem"))),
        "blinky-1.1.0-encrypted-aes256-x25519-ed25519.bin": (ed25519, sign(ed25519, "1.1.0", blinky,
                                                                       "blinky-1.1.0-encrypted-aes256-x25519-ed25519.bin",
                                                                       "--encrypt", os.path.join(out, "encryption-x25519.pub.pem"),
                                                                       "--encrypt-keylen", "256")),
        "blinky-1.1.0-needs-image1-1.2.0+3-counter7-ecdsa-p256.bin": (p256, sign(p256, "1.1.0", blinky,
                                                                             "blinky-1.1.0-needs-image1-1.2.0+3-counter7-ecdsa-p256.bin",
                                                                             "--dependencies", "(1, 1.2.0+3)", "--security-counter", "7")),
    }
    for slot, offset in XIP_SLOTS.items():
        name = f"blinky-1.1.0-xip-slot{slot}-ecdsa-p256.bin"
        images[name] = (p256, sign(p256, "1.1.0", blinky, name, "--rom-fixed", hex(offset)))

    # A two-core (nRF5340-shaped) product: the application needs the network core at 1.1.0 or later.
    staging = os.path.join(keys, "staging")
    os.makedirs(staging)
    app = os.path.join(staging, "app.bin")
    net = os.path.join(staging, "net.bin")
    run("sign", "--key", p256, "--header-size", "0x200", "--pad-header", "--align", "4", "--slot-size", "0x80000",
        "--version", "2.0.1", "--dependencies", "(1, 1.1.0)", os.path.join(cortex, "sensor-hub-2.0.1.bin"), app)
    run("sign", "--key", p256, "--header-size", "0x200", "--pad-header", "--align", "4", "--slot-size", "0x40000",
        "--version", "1.1.0", blinky, net)
    xip0 = images["blinky-1.1.0-xip-slot0-ecdsa-p256.bin"][1]
    xip1 = images["blinky-1.1.0-xip-slot1-ecdsa-p256.bin"][1]

    def package(name, format_version, entries):
        """entries: (file name in the zip, path, keys); keys as generate_zip.py writes them."""
        files = []
        with zipfile.ZipFile(os.path.join(out, name), "w", zipfile.ZIP_DEFLATED) as archive:
            for file_name, path, fields in entries:
                with open(path, "rb") as handle:
                    data = handle.read()
                info = zipfile.ZipInfo(file_name, date_time=(2025, 12, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
                entry = {key: (int(value, 16) if isinstance(value, str) and value.startswith("0x") else value)
                         for key, value in fields.items()}
                entry.update({"size": len(data), "file": file_name, "modtime": made})
                files.append(entry)
            manifest = {"format-version": format_version, "time": made, "files": files, "name": "sensor_hub"}
            info = zipfile.ZipInfo("manifest.json", date_time=(2025, 12, 1, 0, 0, 0))
            archive.writestr(info, json.dumps(manifest, indent=4))

    common = {"type": "application", "board": "nrf5340dk/nrf5340/cpuapp", "soc": "nrf5340"}
    net_core = {"type": "application", "board": "nrf5340dk/nrf5340/cpunet", "soc": "nrf5340"}
    package("nrf5340-sysbuild-dfu_application.zip", 1, [
        ("sensor_hub.signed.bin", app, dict(common, load_address="0xc200", image_index="0", slot_index_primary="1",
                                            slot_index_secondary="2", version_MCUBOOT="2.0.1")),
        ("ipc_radio.bin", net, dict(net_core, load_address="0x1008800", image_index="1", slot_index_primary="3",
                                    slot_index_secondary="4", version_MCUBOOT="1.1.0")),
    ])
    package("nrf5340-before-sysbuild-dfu_application.zip", 0, [
        ("app_update.bin", app, dict(common, board="nrf5340dk_nrf5340_cpuapp", load_address="0xc200", image_index="0",
                                     slot_index_primary="1", slot_index_secondary="2", version_MCUBOOT="2.0.1")),
        ("net_core_app_update.bin", net, dict(net_core, board="nrf5340dk_nrf5340_cpunet", load_address="0x1008800",
                                              image_index="1", slot_index_primary="3", slot_index_secondary="4",
                                              version_MCUBOOT="1.1.0")),
    ])
    xip = {"type": "application", "board": "nrf52840dk/nrf52840", "soc": "nrf52840"}
    package("nrf52840-direct-xip-dfu_application.zip", 1, [
        ("blinky.signed.bin", xip0, dict(xip, load_address=hex(XIP_SLOTS[0] + 0x200), image_index="0", slot="0",
                                         **{"version_MCUBOOT+XIP": "1.1.0"})),
        ("mcuboot_secondary_app.signed.bin", xip1, dict(xip, load_address=hex(XIP_SLOTS[1] + 0x200), image_index="0", slot="1",
                                                        **{"version_MCUBOOT+XIP": "1.1.0"})),
    ])
    images["two-core application (in the nRF5340 packages)"] = (p256, app)
    images["two-core network core (in the nRF5340 packages)"] = (p256, net)

    # What imgtool reads back: its verdict, version and digest per image, with the signing key.
    reads = {"tool": f"imgtool-{version}", "images": {}}
    for name, (key, path) in sorted(images.items()):
        verdict = subprocess.run([imgtool, "verify", "-k", key, path], capture_output=True, text=True).stdout.strip().splitlines()
        reads["images"][name] = verdict
    with open(os.path.join(out, "imgtool-verify.json"), "w") as handle:
        json.dump(reads, handle, indent=2, sort_keys=True)
        handle.write("\n")
finally:
    shutil.rmtree(keys, ignore_errors=True)
print(f"wrote {out}", file=sys.stderr)
