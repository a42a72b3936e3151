#!/usr/bin/env python3
"""Resolvable private addresses made by Google's Bumble, for bleota's resolver tests.

Writes Tests/BleotaBlueZTests/Fixtures/bumble-<version>-rpa.json: IRKs (least
significant byte first, as SMP and the management interface carry them), addresses
Bumble's Address.generate_private_address made with each (written most significant
byte first), and the hash Bumble's crypto.ah gives for a fixed prand. Run with a
Python that has bumble installed (pip install bumble); the IRKs come from a seeded
generator so a re-run differs only in Bumble's own random prands.
"""
import json, random, sys
import bumble
from bumble import crypto
from bumble.hci import Address

rng = random.Random(31)
cases = []
for _ in range(8):
    irk = bytes(rng.getrandbits(8) for _ in range(16))
    addresses = [str(Address.generate_private_address(irk)).split("/")[0] for _ in range(3)]
    prand = bytes([0x94, 0x81, 0x70])  # little-endian 0x708194
    cases.append({
        "irk": irk.hex(),
        "addresses": addresses,
        "prand": prand[::-1].hex(),
        "hash": crypto.ah(irk, prand)[::-1].hex(),
    })
version = getattr(bumble, "__version__", "unknown")
path = f"Tests/BleotaBlueZTests/Fixtures/bumble-{version}-rpa.json"
with open(path, "w") as out:
    json.dump({"tool": f"bumble {version}", "cases": cases}, out, indent=1)
    out.write("\n")
print(path)
