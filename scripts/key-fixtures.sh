#!/usr/bin/env bash
# Writes private keys made by OpenSSL, and the public keys OpenSSL derives from
# them, to samples/keys/ named with OpenSSL's version. The tests check that
# bleota derives the same public key from each private key (`image info --key`
# and `flash --key` accept private keys, as imgtool does). These keys are test
# fixtures: they sign nothing that is flashed anywhere.
#
#   scripts/key-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(openssl version | awk '{print $2}')
out=samples/keys
prefix=$out/openssl-$version
mkdir -p "$out"

# ECDSA P-256: PKCS#8 ("PRIVATE KEY") as genpkey writes it, and the same key in
# SEC1 ("EC PRIVATE KEY") as `openssl ec` and imgtool's older keys hold it.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$prefix-ec-p256-private.pem"
openssl ec -in "$prefix-ec-p256-private.pem" -out "$prefix-ec-p256-private-sec1.pem" 2>/dev/null
openssl pkey -in "$prefix-ec-p256-private.pem" -pubout -out "$prefix-ec-p256-public.pem"

# Ed25519: PKCS#8 only (RFC 8410).
openssl genpkey -algorithm ed25519 -out "$prefix-ed25519-private.pem"
openssl pkey -in "$prefix-ed25519-private.pem" -pubout -out "$prefix-ed25519-public.pem"

ls -l "$prefix"-*
