import ArgumentParser
import BleotaCodec
import Foundation

/// `bleota delta`: make, apply and describe delta patches (detools' sequential format).
struct DeltaCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delta",
        abstract: "Make, apply and describe delta patches: detools' sequential format, heatshrink-compressed, optionally behind esp_delta_ota's header.",
        discussion: """
            A patch carries only what changed between two images, so a small change sends a small fraction of the \
            image. detools 0.53.0 applies bleota's patches and bleota applies detools' (sequential, compression \
            heatshrink or none). protocols/delta.md describes the format.
            """,
        subcommands: [DeltaCreate.self, DeltaApply.self, DeltaInfo.self])
}

struct DeltaCreate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create", abstract: "Make a patch that turns OLD into NEW; the patch file is written atomically.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The image the device runs (the base).") var old: String
    @Argument(help: "The image to send.") var new: String
    @Option(name: [.short, .customLong("output")], help: "The patch file to write.") var output: String
    @Option(name: .customLong("compression"), help: "heatshrink (window 2^8, lookahead 2^7, as detools and esp_delta_ota default to) or none.")
    var compressionChoice: PatchCompression = .heatshrink
    var compression: DeltaPatchHeader.Compression { compressionChoice == .heatshrink ? .heatshrink : .none }
    @Flag(name: .customLong("esp-header"), help: "Put esp_delta_ota's 64-byte header first: magic 0xfccdde10 and the SHA-256 the ESP32 reports for OLD.")
    var espHeader = false

    func run() async throws {
        try checkOutputPath(output)
        let oldBytes = try readInputFile(old)
        let newBytes = try readInputFile(new)
        let started = ContinuousClock.now
        let baseHash = espHeader ? DeltaPatch.espBaseSHA256(of: oldBytes) : nil
        let patch = DeltaPatch.create(from: oldBytes, to: newBytes, compression: compression, espBaseSHA256: baseHash)
        let seconds = (ContinuousClock.now - started).seconds
        try writeFileAtomically(patch, to: output)
        let ratio = newBytes.isEmpty ? 0 : Double(patch.count) / Double(newBytes.count)
        if global.json {
            struct Created: Codable {
                var patch: String
                var format = "detools sequential"
                var compression: String
                var oldSize: Int
                var newSize: Int
                var patchSize: Int
                var ratio: Double
                var baseSHA256: String
                var newSHA256: String
                var espHeader: Bool
                var seconds: Double
            }
            let created = Created(
                patch: output, compression: compression.description, oldSize: oldBytes.count, newSize: newBytes.count, patchSize: patch.count,
                ratio: ratio, baseSHA256: (baseHash ?? SHA256Digest.hash(oldBytes)).hexString, newSHA256: SHA256Digest.hash(newBytes).hexString,
                espHeader: espHeader, seconds: seconds)
            Terminal.standardOutput.writeLine(try JSONOutput.string(created))
        } else {
            Terminal.standardOutput.writeLine(
                String(
                    format: "wrote %@: %d bytes, %.1f %% of %@'s %d (%@%@), in %@", output, patch.count, ratio * 100, new, newBytes.count,
                    compression.description, espHeader ? ", esp_delta_ota header" : "", formatDuration(seconds)))
        }
    }
}

struct DeltaApply: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apply",
        abstract: "Rebuild the new image from OLD and PATCH; written atomically, and only when the patch applies whole.",
        discussion: """
            A plain detools patch does not name its base, so another image than the one it was made from \
            can rebuild into a wrong one without an error: --expect-sha256 checks the result first (a note \
            says so when it is not given). Exit 3 when the patch is damaged, truncated or not one bleota \
            applies; 5 when its esp_delta_ota header names another base or the result is not \
            --expect-sha256; nothing is written then.
            """)
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The image the patch was made from.") var old: String
    @Argument(help: "The patch.") var patch: String
    @Option(name: [.short, .customLong("output")], help: "The image to write.") var output: String
    @Option(
        name: .customLong("expect-sha256"),
        help: ArgumentHelp(
            "The SHA-256 the new image must have (delta create --json prints it as newSHA256): another result is refused before anything is written.",
            valueName: "HEX"))
    var expectedSHA256: String?

    /// `--expect-sha256` as bytes: 64 hex digits, either case.
    var expected: [UInt8]? {
        guard let expectedSHA256, expectedSHA256.utf8.count == 64 else { return nil }
        var bytes: [UInt8] = []
        var digits = expectedSHA256.makeIterator()
        while let high = digits.next(), let low = digits.next() {
            guard let byte = UInt8(String([high, low]), radix: 16) else { return nil }
            bytes.append(byte)
        }
        return bytes.count == 32 ? bytes : nil
    }

    func validate() throws {
        if let expectedSHA256, expected == nil {
            throw ValidationError("--expect-sha256 '\(expectedSHA256)' is not a SHA-256: give its 64 hex digits (delta create --json prints it as newSHA256)")
        }
    }

    func run() async throws {
        try checkOutputPath(output)
        let oldBytes = try readInputFile(old)
        let patchBytes = try readInputFile(patch)
        let header: DeltaPatchHeader
        do { header = try DeltaPatchHeader(reading: patchBytes) } catch { throw CommandFailure(.badInput, "\(patch): \(error)") }
        if let expected = header.espBaseSHA256 {
            let actual = DeltaPatch.espBaseSHA256(of: oldBytes)
            guard actual == expected else {
                throw CommandFailure(
                    .verificationFailed,
                    "\(patch) was made for a base with SHA-256 \(expected.hexString), but \(old) has \(actual.hexString): give the image the patch was made from; nothing was written"
                )
            }
        } else if expected == nil {
            Terminal.standardError.writeLine(
                "note: \(patch) is a plain detools patch, which does not name its base, so bleota cannot check that \(old) is it: give --expect-sha256 the new image's SHA-256 to check the result"
            )
        }
        let rebuilt: [UInt8]
        do { rebuilt = try DeltaPatch.apply(patchBytes, to: oldBytes) } catch {
            throw CommandFailure(.badInput, "\(patch): \(error); nothing was written")
        }
        let hash = SHA256Digest.hash(rebuilt)
        if let expected, hash != expected {
            throw CommandFailure(
                .verificationFailed,
                "\(old) and \(patch) make an image with SHA-256 \(hash.hexString), not the \(expected.hexString) of --expect-sha256: give the image the patch was made from as OLD; nothing was written"
            )
        }
        try writeFileAtomically(rebuilt, to: output)
        if global.json {
            struct Applied: Codable {
                var output: String
                var size: Int
                var sha256: String
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Applied(output: output, size: rebuilt.count, sha256: hash.hexString)))
        } else {
            Terminal.standardOutput.writeLine("wrote \(output): \(rebuilt.count) bytes, sha256 \(hash.hexString)")
        }
    }
}

struct DeltaInfo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info", abstract: "Describe a patch: format, compression, sizes, and the base's SHA-256 when its header names one.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The patch.") var patch: String

    struct Described: Codable {
        var patch: String
        var format: String
        var compression: String
        var heatshrinkWindowBits: Int?
        var heatshrinkLookaheadBits: Int?
        var newSize: Int
        var patchSize: Int
        var espHeader: Bool
        var baseSHA256: String?
    }

    func run() async throws {
        let bytes = try readInputFile(patch)
        let header: DeltaPatchHeader
        do { header = try DeltaPatchHeader(reading: bytes) } catch { throw CommandFailure(.badInput, "\(patch): \(error)") }
        var parameters: Heatshrink.Parameters?
        if header.compression == .heatshrink, header.newSize > 0 {
            guard header.size < bytes.count, let read = Heatshrink.Parameters(headerByte: bytes[header.size]) else {
                throw CommandFailure(.badInput, "\(patch): its heatshrink stream is missing or names no valid window and lookahead")
            }
            parameters = read
        }
        let described = Described(
            patch: patch, format: "detools sequential", compression: header.compression.description, heatshrinkWindowBits: parameters?.windowBits,
            heatshrinkLookaheadBits: parameters?.lookaheadBits, newSize: header.newSize, patchSize: bytes.count,
            espHeader: header.espBaseSHA256 != nil, baseSHA256: header.espBaseSHA256.map(\.hexString))
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(described))
            return
        }
        var lines = [
            "patch:       \(patch) (\(bytes.count) bytes)",
            "format:      detools sequential\(header.espBaseSHA256 != nil ? ", behind esp_delta_ota's header" : "")",
            "compression: \(header.compression)\(parameters.map { " (\($0))" } ?? "")",
            "new image:   \(header.newSize) bytes",
        ]
        if let base = header.espBaseSHA256 { lines.append("base:        sha256 \(base.hexString)") }
        Terminal.standardOutput.writeLine(lines.joined(separator: "\n"))
    }
}

/// `delta create --compression`, by name: the patch header's own values are detools' numbers (4 for
/// heatshrink), which `--help` would otherwise show as the default.
enum PatchCompression: String, CaseIterable, ExpressibleByArgument {
    case heatshrink, none
}
