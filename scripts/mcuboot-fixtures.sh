#!/usr/bin/env bash
# Signs sample MCUboot images with imgtool (MCUboot's own signing tool, from
# PyPI) and writes them, their public keys and what imgtool says about them to
# samples/mcuboot/imgtool-VERSION/. The private keys are made fresh each run
# and thrown away; only public keys and signed images are kept.
#
#   python3 -m venv .build-venv && .build-venv/bin/pip install imgtool
#   scripts/mcuboot-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
imgtool=${IMGTOOL:-.build-venv/bin/imgtool}
version=$($imgtool version)
out=samples/mcuboot/imgtool-$version
keys=$(mktemp -d)
trap 'rm -rf "$keys"' EXIT
rm -rf "$out" && mkdir -p "$out"

sign() { # KEY-or-empty VERSION INPUT OUTPUT
    local key=()
    [ -n "$1" ] && key=(--key "$1")
    $imgtool sign "${key[@]}" --header-size 0x200 --pad-header --align 4 --slot-size 0x80000 \
        --version "$2" "$3" "$4"
}

$imgtool keygen -k "$keys/p256.pem" -t ecdsa-p256
$imgtool keygen -k "$keys/ed25519.pem" -t ed25519
$imgtool keygen -k "$keys/other.pem" -t ecdsa-p256
$imgtool getpub -k "$keys/p256.pem" -e pem > "$out/ecdsa-p256.pub.pem"
$imgtool getpub -k "$keys/ed25519.pem" -e pem > "$out/ed25519.pub.pem"
$imgtool getpub -k "$keys/other.pem" -e pem > "$out/other-ecdsa-p256.pub.pem"

sign "$keys/p256.pem" 1.1.0 samples/firmware/app-v2.bin "$out/app-1.1.0-ecdsa-p256.bin"
sign "$keys/ed25519.pem" 1.2.0+7 samples/firmware/app-v2.bin "$out/app-1.2.0+7-ed25519.bin"
sign "" 1.0.1 samples/firmware/blinky.bin "$out/blinky-1.0.1-unsigned.bin"

# What imgtool itself reads back: version and digest per image.
{
    echo "{"
    echo "  \"tool\": \"imgtool-$version\","
    first=1
    for image in "$out"/*.bin; do
        case "$image" in *ecdsa-p256*) key="$keys/p256.pem" ;; *ed25519*) key="$keys/ed25519.pem" ;; *) key="" ;; esac
        report=$($imgtool verify ${key:+--key "$key"} "$image" 2>&1 || true)
        image_version=$(echo "$report" | sed -n 's/^Image version: //p')
        digest=$(echo "$report" | sed -n 's/^Image digest: //p')
        [ $first = 1 ] || echo ","
        first=0
        printf '  "%s": { "version": "%s", "digest": "%s", "verified": %s }' "$(basename "$image")" "$image_version" "$digest" \
            "$(echo "$report" | grep -q 'correctly validated' && echo true || echo false)"
    done
    echo
    echo "}"
} > "$out/imgtool-verify.json"
cat "$out/imgtool-verify.json"
