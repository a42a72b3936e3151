#!/usr/bin/env python3
"""Writes SMP messages encoded by the `smp` package (the protocol layer of the
smpclient/smpmgr MCUmgr tools) to Tests/BleotaProtocolsTests/Fixtures/smp-VERSION.json.

    .build-venv/bin/pip install smp && .build-venv/bin/python scripts/smp-vectors.py

Each vector: the whole message (header + CBOR) as hex, the header fields, and
for serial framing the console lines smp.packet.encode produces.
"""
import json
from importlib.metadata import version
from pathlib import Path

from smp import header as h
from smp import packet
from smp.file_management import FileDownloadRequest, FileUploadRequest, FileUploadResponse
from smp.image_management import (ImageState, ImageStatesReadRequest, ImageStatesReadResponse, ImageStatesWriteRequest,
                                  ImageUploadWriteRequest, ImageUploadWriteResponse, ImageManagementErrorV2,
                                  IMG_MGMT_ERR)
from smp.error import Err, ErrorV1, MGMT_ERR
from smp.os_management import (OSManagementErrorV1, BootloaderInformationReadResponse, EchoWriteRequest, EchoWriteResponse,
                               MCUMgrParametersReadRequest, MCUMgrParametersReadResponse, ResetWriteRequest,
                               ResetWriteResponse)

messages = {
    "echo request": EchoWriteRequest(d="hello", sequence=1),
    "echo response": EchoWriteResponse(r="hello", sequence=1),
    "parameters request": MCUMgrParametersReadRequest(sequence=2),
    "parameters response": MCUMgrParametersReadResponse(buf_size=2475, buf_count=4, sequence=2),
    "bootloader info response": BootloaderInformationReadResponse(bootloader="MCUboot", sequence=3),
    "reset request": ResetWriteRequest(sequence=4),
    "reset response": ResetWriteResponse(sequence=4),
    "image state read": ImageStatesReadRequest(sequence=5),
    "image state response": ImageStatesReadResponse(images=[ImageState(slot=0, version="1.0.0", hash=bytes(range(32)),
                                                                       bootable=True, confirmed=True, active=True)],
                                                    splitStatus=0, sequence=5),
    "image state test": ImageStatesWriteRequest(hash=bytes(range(32)), confirm=False, sequence=6),
    "image state confirm": ImageStatesWriteRequest(confirm=True, sequence=7),
    "upload first chunk": ImageUploadWriteRequest(off=0, data=bytes(range(64)), image=0, len=4096,
                                                  sha=bytes(range(32)), upgrade=False, sequence=8),
    "upload later chunk": ImageUploadWriteRequest(off=300, data=bytes(range(200)), sequence=9),
    "upload response": ImageUploadWriteResponse(off=364, sequence=9),
    "file upload": FileUploadRequest(name="/lfs/a.txt", off=0, data=b"abc", len=3, sequence=12),
    "file upload response": FileUploadResponse(off=3, sequence=12),
    "file download": FileDownloadRequest(name="/lfs/a.txt", off=0, sequence=13),
}

vectors = []
for name, message in messages.items():
    raw = bytes(message)
    head = message.header
    vectors.append({
        "name": name, "hex": raw.hex(), "op": int(head.op), "version": int(head.version), "group": int(head.group_id),
        "sequence": head.sequence, "command": int(head.command_id), "length": head.length,
        "serial": [line.hex() for line in packet.encode(raw, line_length=128)],
    })
# Error responses are only ever decoded by the package: build them from a
# header and cbor2, then have the package's own error models load them.
import cbor2
def error_message(op, version_, group, sequence, command, body):
    data = cbor2.dumps(body, canonical=True)
    return bytes(h.Header(op=op, version=version_, flags=h.Flag(0), length=len(data), group_id=group,
                          sequence=sequence, command_id=command)) + data
v2 = error_message(h.OP.WRITE_RSP, h.Version.V2, 1, 10, 1, {"err": {"group": 1, "rc": 28}})
assert ImageManagementErrorV2.loads(v2).err.rc == IMG_MGMT_ERR.IMAGE_ALREADY_PENDING
v1 = error_message(h.OP.READ_RSP, h.Version.V1, 0, 11, 7, {"rc": 8})
assert OSManagementErrorV1.loads(v1).rc == MGMT_ERR.ENOTSUP
for name, raw in (("image error v2", v2), ("error v1", v1)):
    head = h.Header.loads(raw[:8])
    vectors.append({"name": name, "hex": raw.hex(), "op": int(head.op), "version": int(head.version),
                    "group": int(head.group_id), "sequence": head.sequence, "command": int(head.command_id),
                    "length": head.length, "serial": [line.hex() for line in packet.encode(raw, line_length=128)]})

# A message long enough to need continuation lines.
long = bytes(ImageUploadWriteRequest(off=512, data=bytes(range(256)) * 2, sequence=14))
vectors.append({"name": "serial multi-line", "hex": long.hex(), "op": 2, "version": 1, "group": 1, "sequence": 14,
                "command": 1, "length": len(long) - 8, "serial": [line.hex() for line in packet.encode(long, line_length=128)]})

tool = f"smp-{version('smp')}"
out = Path(__file__).resolve().parent.parent / "Tests" / "BleotaProtocolsTests" / "Fixtures" / f"{tool}.json"
out.write_text(json.dumps({"tool": tool, "vectors": vectors}, indent=1) + "\n")
print(f"wrote {len(vectors)} vectors to {out}")
