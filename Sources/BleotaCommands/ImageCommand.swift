import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaSystem
import Foundation

/// `bleota image …`: look inside firmware files and convert between formats.
struct ImageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "image",
        abstract: "Inspect and convert firmware images (raw .bin, Intel HEX, Motorola S-record, MCUboot, Nordic DFU packages).",
        subcommands: [ImageInfo.self, ImageConvert.self, ImageState.self, ImageErase.self]
    )
}

extension ImageFormat: ExpressibleByArgument {
    public init?(argument: String) {
        switch argument.lowercased() {
        case "bin", "binary", "raw": self = .bin
        case "hex", "ihex", "intel-hex": self = .intelHex
        case "srec", "s19", "s28", "s37", "mot": self = .srec
        default: return nil
        }
    }

    public static var allValueStrings: [String] { ["bin", "hex", "srec"] }

    var displayName: String {
        switch self {
        case .bin: "raw binary"
        case .intelHex: "Intel HEX"
        case .srec: "Motorola S-record"
        }
    }

    var shortName: String {
        switch self {
        case .bin: "bin"
        case .intelHex: "hex"
        case .srec: "srec"
        }
    }
}

/// Options for reading an image file, shared by every command that takes one.
struct ImageInputOptions: ParsableArguments {
    @Option(name: .customLong("input-format"), help: "Format of the input when its extension does not say (bin, hex, srec).")
    var inputFormat: ImageFormat?

    @Option(name: .long, help: "Load address of a raw .bin image (e.g. 0x8000).", transform: parseAddress)
    var baseAddress: UInt32 = 0

    @Option(name: .long, help: "Byte that fills gaps between segments when an image is flattened.", transform: parseByte)
    var fill: UInt8 = 0xFF

    /// Loads an image, kept sparse: nothing is flattened here. With `limit`, an
    /// image whose flattened size is larger is refused (a raw .bin by its file
    /// size, before it is read).
    func load(_ path: String, limit: Int = .max, maximumSpan: Int = .max) throws -> FirmwareImage {
        // A .zip is no flat image: a protocol whose package it is says what it is, or what is
        // wrong with it, in the words flash and image info use.
        if inputFormat == nil, case let probe = ImageFiles.probe(path), probe.head.starts(with: [0x50, 0x4B, 0x03, 0x04]) {
            for owner in CommandContext.registry.protocols where owner.imageAffinity(probe) == .owns {
                do { _ = try owner.describeImage(ImageRequest(path: path)) } catch { throw error.commandFailure }
                throw CommandFailure(
                    .badInput, "\(path) is a \(owner.identity.displayName) package, not one image: bleota image info shows its parts, and bleota flash takes it whole")
            }
        }
        do {
            return try FirmwareImage.load(path: path, format: inputFormat, baseAddress: baseAddress, limit: limit, maximumSpan: maximumSpan)
        } catch {
            throw CommandFailure(.badInput, String(describing: error))
        }
    }

    /// Loads an image and flattens it with `--fill`, refusing one larger than
    /// `limit` bytes before flattening.
    func loadFlattened(_ path: String, limit: Int) throws -> [UInt8] {
        let image = try load(path, limit: limit)
        do {
            return try image.flattened(fill: fill, limit: limit, fileName: (path as NSString).lastPathComponent)
        } catch {
            throw CommandFailure(.badInput, String(describing: error))
        }
    }

    /// The first `count` bytes of the file at `path` (to recognise a format by
    /// its magic), with the same checks as reading all of it: a FIFO or device
    /// is refused instead of blocking.
    func leadingBytes(_ path: String, count: Int) throws -> [UInt8] {
        do { return try InputFile.prefix(path, count: count) } catch { throw CommandFailure(.badInput, error.description) }
    }
}

/// `--max-span`, for the commands that flatten an image (`flash`, `image convert` to a `.bin`).
struct SpanOption: ParsableArguments {
    @Option(
        name: .customLong("max-span"),
        help: ArgumentHelp(
            "The most an image's segments may span, lowest address to highest end, where it is flattened (default 256MiB): a HEX whose few records lie far apart is refused before it is filled in.",
            valueName: "SIZE"),
        transform: parseSize)
    var given: Int?

    var maximumSpan: Int { given ?? FirmwareImage.defaultMaximumSpan }
}

/// Bytes: a number, or one with KiB, MiB or GiB after it (`256MiB`), up to 4 GiB.
func parseSize(_ text: String) throws -> Int {
    let units: [(String, Int)] = [("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30), ("b", 1)]
    let lower = text.lowercased()
    let (digits, scale) = units.first { lower.hasSuffix($0.0) }.map { (String(lower.dropLast($0.0.count)), $0.1) } ?? (lower, 1)
    guard let number = Int(digits.trimmingCharacters(in: .whitespaces)), number > 0, number <= (1 << 32) / scale else {
        throw ValidationError("write bytes, or a number with KiB, MiB or GiB (256MiB), from 1 byte to 4GiB")
    }
    return number * scale
}

func parseAddress(_ text: String) throws -> UInt32 {
    let value: UInt32?
    if text.lowercased().hasPrefix("0x") { value = UInt32(text.dropFirst(2), radix: 16) } else { value = UInt32(text) }
    guard let value else { throw ValidationError("'\(text)' is not an address: use decimal or 0x-prefixed hex up to 0xFFFFFFFF") }
    return value
}

func parseByte(_ text: String) throws -> UInt8 {
    guard let value = try? parseAddress(text), value <= 0xFF else {
        throw ValidationError("'\(text)' is not a byte: use 0…255 or 0x00…0xFF")
    }
    return UInt8(value)
}

/// What `image info --json` prints; field names are part of the CLI's contract.
struct ImageReport: Encodable, Equatable {
    struct Segment: Codable, Equatable {
        var address: UInt32
        var length: Int
    }
    var file: String
    var format: String
    var segments: [Segment]
    var baseAddress: UInt32
    var size: Int
    var startAddress: UInt32?
    var header: String?
    var fill: UInt8
    var crc32: String
    var sha256: String
    /// The protocol whose bootloader's own format this is (the one `flash` picks for it), when one is.
    var `protocol`: String?
    /// That format, as the protocol names it ("ESP-IDF application (.bin)").
    var madeFor: String?
    /// What a protocol finds inside the image (an MCUboot header and TLVs), under its own key ("mcuboot").
    var embedded: ImageDescription.Embedded?
    /// Set when the image does not verify: the one-line error and the exit status (5).
    var error: String?
    var exitStatus: Int32?

    /// Sizes and checksums come from the sparse image: one streaming pass, no gap materialised.
    init(file: String, image: FirmwareImage, fill: UInt8) {
        self.file = file
        format = image.format.shortName
        segments = image.segments.map { Segment(address: $0.address, length: $0.bytes.count) }
        baseAddress = image.baseAddress
        size = image.size
        startAddress = image.startAddress
        header = image.header
        self.fill = fill
        let checksums = image.checksums(fill: fill)
        crc32 = hex32(checksums.crc32)
        sha256 = checksums.sha256.hexString
    }

    /// The report's fields, then the embedded description under its own key.
    func encode(to encoder: any Encoder) throws {
        typealias Key = ImageDescription.FieldKey
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(file, forKey: Key("file"))
        try container.encode(format, forKey: Key("format"))
        try container.encode(segments, forKey: Key("segments"))
        try container.encode(baseAddress, forKey: Key("baseAddress"))
        try container.encode(size, forKey: Key("size"))
        try container.encodeIfPresent(startAddress, forKey: Key("startAddress"))
        try container.encodeIfPresent(header, forKey: Key("header"))
        try container.encode(fill, forKey: Key("fill"))
        try container.encode(crc32, forKey: Key("crc32"))
        try container.encode(sha256, forKey: Key("sha256"))
        try container.encodeIfPresent(`protocol`, forKey: Key("protocol"))
        try container.encodeIfPresent(madeFor, forKey: Key("madeFor"))
        try container.encodeIfPresent(error, forKey: Key("error"))
        try container.encodeIfPresent(exitStatus, forKey: Key("exitStatus"))
        if let embedded { try container.encode(embedded, forKey: Key(embedded.key)) }
    }
}

struct ImageInfo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show an image's format, segments, size, CRC-32 and SHA-256.",
        discussion: "CRC-32 and SHA-256 are of the flattened image: lowest to highest address, gaps filled with --fill."
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var input: ImageInputOptions
    @Option(name: .long, help: "For an MCUboot image: verify its signature with this public key, or the private key it comes from (PEM or DER).") var key: String?
    @Argument(help: "The image file.") var file: String

    func run() async throws {
        // Every protocol is asked: one whose own format the file is (a Nordic package) describes
        // it instead of the plain report; one that finds its metadata inside a plain image (an
        // MCUboot header) adds to the report.
        let request = ImageRequest(path: file, keyPath: key, inputFormat: input.inputFormat?.rawValue, baseAddress: input.baseAddress, fill: input.fill)
        var embedded: ImageDescription?
        for candidate in CommandContext.registry.protocols {
            let described: ImageDescription?
            do { described = try candidate.describeImage(request) } catch { throw error.commandFailure }
            guard let description = described else { continue }
            if description.embedded != nil {
                embedded = embedded ?? description
                continue
            }
            let failure = description.problem.map { CommandFailure(.verificationFailed, $0, reportedInJSON: global.json) }
            if global.json {
                let report = ProtocolImageReport(
                    file: file, protocolName: candidate.name, description: description,
                    exitStatus: failure?.status.rawValue)
                Terminal.standardOutput.writeLine(try JSONOutput.string(report))
            } else {
                Terminal.standardOutput.writeLine((["file:      \(file)", "protocol:  \(candidate.name)"] + description.lines).joined(separator: "\n"))
            }
            if let failure { throw failure }
            return
        }
        let image = try input.load(file)
        var report = ImageReport(file: file, image: image, fill: input.fill)
        // What `flash` would pick for it: the protocol whose own format it is.
        let probe = ImageFiles.probe(file)
        let owner = CommandContext.registry.protocols.first(where: { $0.imageAffinity(probe) == .owns })
        if let owner {
            report.protocol = owner.name
            report.madeFor = owner.identity.imageFormats.first
        }
        logUnreadCompanions(of: probe, chosen: owner, logger: global.makeLogger("bleota.image"))
        if embedded == nil, key != nil {
            throw CommandFailure(.badInput, "\(file) is not an MCUboot image, so --key has nothing to verify")
        }
        report.embedded = embedded?.embedded
        // A damaged or unverifiable image is reported, and the exit status says so:
        // with --json in the one document printed, as `error` and `exitStatus`.
        var failure: CommandFailure?
        if let problem = embedded?.problem {
            failure = CommandFailure(.verificationFailed, problem, reportedInJSON: global.json)
            report.error = failure?.message
            report.exitStatus = failure?.status.rawValue
        } else if embedded == nil, let owner {
            // The protocol whose format it is checks it as flash would (an ESP-IDF image's checksum and
            // SHA-256, a DA1469x or TI OAD header's CRC, a GBL's tags), so a damaged image is not
            // reported as fine here and refused there; the exit status is flash's.
            do { _ = try owner.prepareImage(request) } catch {
                failure = CommandFailure(error.exitStatus, error.message, reportedInJSON: global.json)
                report.error = failure?.message
                report.exitStatus = failure?.status.rawValue
            }
        }
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(report))
        } else {
            Terminal.standardOutput.writeLine(textLines(report, image: image).joined(separator: "\n"))
        }
        if let failure { throw failure }
    }

    func textLines(_ report: ImageReport, image: FirmwareImage) -> [String] {
        var lines = [
            "file:      \(file)",
            "format:    \(image.format.displayName)" + (report.madeFor.map { ", \($0)" } ?? ""),
        ]
        if let name = report.protocol { lines.append("protocol:  \(name) (what flash speaks to carry it)") }
        if let header = report.header { lines.append("header:    \(printable(header))") }
        lines.append("segments:  \(report.segments.count)")
        for segment in report.segments {
            let end = UInt64(segment.address) + UInt64(segment.length)
            lines.append("  \(hex32(segment.address))–\(hex32(UInt32(truncatingIfNeeded: end)))  \(segment.length) bytes")
        }
        if let start = report.startAddress { lines.append("start:     \(hex32(start))") }
        lines.append("size:      \(report.size) bytes flattened from \(hex32(report.baseAddress)), gaps filled with 0x\(String(format: "%02X", input.fill))")
        lines.append("crc32:     \(report.crc32)")
        lines.append("sha256:    \(report.sha256)")
        if let embedded = report.embedded { lines += embedded.lines }
        return lines
    }
}

/// `image info --json` of an image a protocol describes.
struct ProtocolImageReport: Encodable {
    var file: String
    var protocolName: String
    var description: ImageDescription
    /// Set (5) when something did not verify; `error` then says what.
    var exitStatus: Int32?

    enum CodingKeys: String, CodingKey {
        case file
        case protocolName = "protocol"
        case format, parts, error, exitStatus
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(file, forKey: .file)
        try container.encode(protocolName, forKey: .protocolName)
        try container.encode(description.format, forKey: .format)
        try container.encode(description.parts, forKey: .parts)
        try container.encodeIfPresent(description.problem, forKey: .error)
        try container.encodeIfPresent(exitStatus, forKey: .exitStatus)
    }
}

/// `text` with control characters (C0, DEL, C1) shown as `\xNN` / `\u{NN}`: an
/// S0 header is the file's own bytes, and printed raw it could drive the terminal.
func printable(_ text: String) -> String {
    var result = ""
    for scalar in text.unicodeScalars {
        switch scalar.value {
        case 0x00..<0x20, 0x7F: result += String(format: "\\x%02X", scalar.value)
        case 0x80..<0xA0: result += String(format: "\\u{%02X}", scalar.value)
        default: result.unicodeScalars.append(scalar)
        }
    }
    return result
}

struct ImageConvert: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "convert",
        abstract: "Convert an image between raw .bin, Intel HEX and Motorola S-record.",
        discussion: "The output is written to a temporary file and renamed into place, so a failed conversion never leaves a half-written file."
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var input: ImageInputOptions
    @OptionGroup var span: SpanOption
    @Option(name: .long, help: "Output format when the output's extension does not say (bin, hex, srec).")
    var format: ImageFormat?
    @Argument(help: "The image to read.") var inputFile: String
    @Argument(help: "The file to write.") var outputFile: String

    func run() async throws {
        // A path that could never be written is named before anything is read, as every command does.
        try checkOutputPath(outputFile)
        // A .bin holds every byte from the lowest address to the highest end; HEX and S-records
        // hold only the segments, so only a .bin is refused for its span (a raw input by its size,
        // before it is read).
        let wantsBinary = (format ?? ImageFormat(pathExtension: outputFile)) == .bin
        let image = try input.load(inputFile, maximumSpan: wantsBinary ? span.maximumSpan : .max)
        guard let outputFormat = format ?? ImageFormat(pathExtension: outputFile) else {
            throw CommandFailure(.usage, "cannot tell the output format of '\(outputFile)' from its extension: add --format bin, hex or srec")
        }
        do {
            try image.write(to: outputFile, format: outputFormat, fill: input.fill)
        } catch {
            // The error names the file and says nothing was changed.
            throw CommandFailure(.failure, "\(error)")
        }
        if global.json {
            struct Converted: Codable {
                var input: String
                var output: String
                var format: String
                var size: Int
                var crc32: String
            }
            let result = Converted(input: inputFile, output: outputFile, format: outputFormat.shortName, size: image.size, crc32: hex32(image.crc32(fill: input.fill)))
            Terminal.standardOutput.writeLine(try JSONOutput.string(result))
        } else {
            // A .bin holds one flat run: the segments it was made of are said as filled into it.
            let count = image.segments.count
            let layout =
                outputFormat == .bin
                ? (count == 1 ? "1 segment" : "\(count) segments filled into one with 0x\(String(format: "%02X", input.fill))")
                : "\(count) segment\(count == 1 ? "" : "s")"
            Terminal.standardOutput.writeLine(
                "wrote \(outputFile) (\(outputFormat.displayName), \(layout), \(image.size) bytes, crc32 \(hex32(image.crc32(fill: input.fill))))")
        }
    }
}
