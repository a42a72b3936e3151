import BleotaCodec
import FuzzSupport

#if canImport(Glibc)
import Glibc
#endif

/// MCUboot images, as `bleota image info`, `flash` and the simulated MCUboot
/// device read them: header, TLV areas, hash and signature checks.
///
/// - Parsing never traps; an error's offset lies inside the input, and an
///   error about the TLV areas points at or after the end of the firmware.
/// - A parsed image's sizes fit the input and account for every byte up to
///   ``MCUbootImage/totalSize``; the hashed region is the input's own prefix.
/// - Hash and signature checks never trap and agree with each other.
/// - An image rebuilt from the parsed header and firmware parses back alike
///   and its hash verifies.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMCUboot(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let image: MCUbootImage
    do {
        image = try MCUbootImage(decoding: input)
    } catch {
        invariant(error.offset >= 0 && error.offset <= input.count, "error offset \(error.offset) outside \(input.count) bytes: \(error)")
        // (The header's own "protected TLV size" field is the one TLV error that may point into it.)
        if error.field.contains("TLV area") || error.field.hasPrefix("TLV "), input.count >= 16 {
            let headerSize = Int(input[8]) | Int(input[9]) << 8
            let imageSize = Int(input[12]) | Int(input[13]) << 8 | Int(input[14]) << 16 | Int(input[15]) << 24
            invariant(
                error.offset >= headerSize + imageSize,
                "a TLV error at offset \(error.offset), inside the header and firmware (which end at \(headerSize + imageSize)): \(error)")
        }
        _ = error.description
        return 0
    }

    invariant(MCUbootImage.startsWithMagic(input), "parsed without the magic")
    let bodyEnd = image.headerSize + image.imageSize
    invariant(image.headerSize >= 32 && bodyEnd <= input.count, "header \(image.headerSize) + image \(image.imageSize) in \(input.count) bytes")
    invariant(image.totalSize <= input.count, "total size \(image.totalSize) beyond \(input.count) bytes")
    invariant(Array(image.hashedBytes) == Array(input[0..<image.hashedBytes.count]), "the hashed bytes are not the input's prefix")
    let protectedTLVs = image.tlvs.filter(\.isProtected)
    let protectedArea = protectedTLVs.isEmpty && image.protectedTLVSize == 0 ? 0 : 4 + protectedTLVs.reduce(0) { $0 + 4 + $1.value.count }
    invariant(protectedArea == image.protectedTLVSize, "protected TLVs take \(protectedArea) bytes, the header says \(image.protectedTLVSize)")
    invariant(image.hashedBytes.count == bodyEnd + protectedArea, "the hashed region is not header, firmware and protected TLVs")
    let unprotectedArea = 4 + image.tlvs.filter { !$0.isProtected }.reduce(0) { $0 + 4 + $1.value.count }
    invariant(image.totalSize == image.hashedBytes.count + unprotectedArea, "the TLV entries do not account for the total size")
    invariant(image.tlvs.firstIndex { !$0.isProtected } ?? image.tlvs.count >= protectedTLVs.count, "protected TLVs after unprotected ones")
    image.tlvs.forEach { _ = $0.name }
    _ = image.version.description

    let computed = image.computedHash
    invariant(computed == SHA256Digest.hash(input[0..<image.hashedBytes.count]), "computed hash is not the SHA-256 of the hashed region")
    let hashResult: ImageVerificationError?
    do {
        try image.verifyHash()
        hashResult = nil
    } catch {
        hashResult = error
        _ = error.description
    }
    switch hashResult {
    // An encrypted image's hash covers its plaintext, which no one without the key can recompute:
    // it passes unchecked (MCUboot checks it after decrypting), and only then.
    case nil: invariant(image.hashTLV == computed || (image.isEncrypted && image.hashTLV != nil), "verifyHash passed a wrong hash")
    case .noHash?: invariant(image.hashTLV == nil, "verifyHash found no hash TLV but there is one")
    case .hashMismatch(let stored, let actual)?: invariant(stored != actual && stored == image.hashTLV && actual == computed, "mismatch reported wrongly")
    default: invariant(false, "verifyHash failed with \(hashResult!)")
    }
    for key in keys {
        do {
            try image.verifySignature(with: key)
            invariant(hashResult == nil && image.signature != nil, "a signature verified for an image whose hash does not")
        } catch {
            if let hashResult { invariant(error == hashResult, "signature check reported \(error), the hash check \(hashResult)") }
            _ = error.description
        }
    }

    // The same header and firmware through bleota's own image builder.
    let firmware = Array(input[image.headerSize..<bodyEnd])
    let rebuilt = MCUbootImage.build(firmware: firmware, version: image.version, headerSize: image.headerSize, loadAddress: image.loadAddress)
    do {
        let again = try MCUbootImage(decoding: rebuilt)
        invariant(
            again.version == image.version && again.loadAddress == image.loadAddress && again.headerSize == image.headerSize
                && again.imageSize == image.imageSize && again.totalSize == rebuilt.count, "a rebuilt image reads back differently")
        try again.verifyHash()
    } catch {
        fatalError("invariant violated: an image bleota built does not verify: \(error)")
    }
    return 0
}

/// A P-256 and an Ed25519 key to try signatures against: the samples' keys
/// when the source tree is where it was built, else Ed25519 keys made here.
let keys: [MCUbootPublicKey] = {
    let samples = #filePath.split(separator: "/").dropLast(4).joined(separator: "/") + "/samples/mcuboot/imgtool-2.5.0/"
    var found: [MCUbootPublicKey] = []
    for name in ["ecdsa-p256.pub.pem", "ed25519.pub.pem"] {
        if let bytes = readFile("/" + samples + name), let key = try? MCUbootPublicKey(bytes) { found.append(key) }
    }
    if found.isEmpty {
        found.append(try! MCUbootPublicKey(MCUbootPublicKey.ed25519(raw: [UInt8](repeating: 7, count: 32)).der))
    }
    return found
}()

func readFile(_ path: String) -> [UInt8]? {
    guard let file = fopen(path, "rb") else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = fread(&buffer, 1, buffer.count, file)
        if count <= 0 { break }
        bytes += buffer[0..<count]
    }
    return bytes
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzMCUboot($0, $1) } }
}
