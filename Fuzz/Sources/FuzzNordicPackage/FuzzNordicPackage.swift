import FuzzSupport
import Glibc

@testable import BleotaProtocols

/// Nordic DFU packages (`.zip`): the archive (ZIPFoundation), the manifest
/// and every member it names, as `image info` and `flash` open them.
///
/// Input: the bytes of the file, written to a file in memory (/dev/shm) and opened.
///
/// - Opening never traps or hangs, whatever the archive holds.
/// - A package that opens has at least one part, each with an image within
///   the member limit, and a Secure DFU part's init packet decoded.
/// - A refusal is one line.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNordicPackage(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let descriptor = open(packagePath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    guard descriptor >= 0 else { fatalError("cannot write \(packagePath)") }
    _ = input.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    close(descriptor)
    do {
        let package = try NordicDFUPackage(contentsOf: packagePath)
        invariant(!package.parts.isEmpty, "a package with no parts opened")
        for part in package.parts {
            invariant(!part.image.isEmpty && part.image.count <= NordicDFUPackage.maximumMemberSize, "part \(part.kind) of \(part.image.count) bytes")
            if package.flavour == .secure { invariant(part.initPacket != nil, "a Secure DFU part without its init packet") }
        }
    } catch {
        invariant(!error.description.contains("\n"), "a refusal of more than one line: \(error)")
    }
    return 0
}

let packagePath = "/dev/shm/bleota-fuzz-\(getpid()).zip"

@main
enum Main {
    static func main() { Fuzzer.main { fuzzNordicPackage($0, $1) } }
}
