import BleotaCodec
import Foundation

/// The first bytes and name of an image file: enough for a protocol to say
/// whether the image is its own (an MCUboot magic, a Nordic package's zip
/// signature, a `.gbl` tag) before anything is read whole.
public struct ImageProbe: Sendable, Hashable {
    public var path: String
    /// Up to the first 64 bytes.
    public var head: [UInt8]
    public init(path: String, head: [UInt8]) {
        self.path = path
        self.head = head
    }

    /// The file name's extension, lower case.
    public var pathExtension: String {
        guard let dot = path.lastIndex(of: "."), !path[dot...].contains("/") else { return "" }
        return path[path.index(after: dot)...].lowercased()
    }
}

/// How strongly an image belongs to a protocol.
public enum ImageAffinity: Int, Sendable, Hashable, Comparable {
    /// It cannot carry this image.
    case refuses = 0
    /// It can carry it as plain bytes.
    case accepts = 1
    /// The image is made for it (its bootloader's format).
    case owns = 2

    public static func < (lhs: ImageAffinity, rhs: ImageAffinity) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// What `flash` asks a protocol to prepare.
public struct ImageRequest: Sendable, Hashable {
    public var path: String
    /// A key to verify the image's signature with; a protocol that cannot
    /// verify a signature must refuse it rather than ignore it.
    public var keyPath: String?
    /// The version the device must report afterwards, when the image does not carry one.
    public var versionLabel: String?
    /// The format of the input when its extension does not say.
    public var inputFormat: String?
    /// Load address of a raw binary.
    public var baseAddress: UInt32
    /// The byte that fills gaps between segments.
    public var fill: UInt8
    /// The most bytes an image's segments may span where it is flattened (`--max-span`): a
    /// protocol loads its image with it (`FirmwareImage.load(path:format:baseAddress:limit:maximumSpan:)`),
    /// so an image too sparse to hold is refused from its segments, before it is filled in.
    public var maximumSpan: Int
    /// Which of a multi-image device's images (cores) the image is for (`flash --image N`,
    /// ``ProtocolCapabilities/multipleImages``); nil: the protocol's default, or every image a package has.
    public var imageNumber: Int?
    /// Direct-XIP: the image's two variants, each linked for one slot (`flash --xip-pair A B`, `path`
    /// the first); the protocol sends the one for the slot the device does not run. Empty otherwise.
    public var xipVariants: [String]

    public init(
        path: String, keyPath: String? = nil, versionLabel: String? = nil, inputFormat: String? = nil,
        baseAddress: UInt32 = 0, fill: UInt8 = 0xFF, maximumSpan: Int = FirmwareImage.defaultMaximumSpan, imageNumber: Int? = nil,
        xipVariants: [String] = []
    ) {
        self.imageNumber = imageNumber
        self.xipVariants = xipVariants
        self.path = path
        self.keyPath = keyPath
        self.versionLabel = versionLabel
        self.inputFormat = inputFormat
        self.baseAddress = baseAddress
        self.fill = fill
        self.maximumSpan = maximumSpan
    }
}

/// Whether a delta patch may go instead of the whole image (`flash --delta`).
public enum DeltaPolicy: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// When the device can apply one, runs the base, and the patch saves 10 % or more.
    case auto
    /// A patch or nothing: an error when the device cannot take one.
    case always
    /// The whole image.
    case never
    public var description: String { rawValue }
}

/// Images bleota has sent before, found by their SHA-256: where a delta patch finds its base
/// when none is given (`flash` keeps a store under the XDG data directory).
public protocol DeltaBaseStore: Sendable {
    /// The image whose SHA-256 is `sha256`, its bytes checked against it; nil when none is held.
    func image(sha256: [UInt8]) -> [UInt8]?
    /// Where the images are kept, for messages.
    var location: String { get }
}

/// The base of a delta patch: the image the device runs, given (`--base FILE`) or looked
/// up by the hash the device reports, and whether to use it.
public struct DeltaBase: Sendable, Hashable {
    /// Where the base comes from.
    public enum Origin: Sendable {
        /// A given image; `source` names it in messages ("--base app-1.0.bin").
        case image(bytes: [UInt8], source: String)
        /// Whatever the store holds for the running image's hash.
        case store(any DeltaBaseStore)
    }

    public var origin: Origin
    public var policy: DeltaPolicy

    public init(bytes: [UInt8], policy: DeltaPolicy, source: String) {
        self.init(origin: .image(bytes: bytes, source: source), policy: policy)
    }

    public init(origin: Origin, policy: DeltaPolicy) {
        self.origin = origin
        self.policy = policy
    }

    /// The base for a device running the image whose SHA-256 is `running`, and how to name it;
    /// or why there is none, in words that end "…: sending the whole image" well.
    public func resolve(running: [UInt8]) -> Result<(bytes: [UInt8], source: String), DeltaBaseMismatch> {
        switch origin {
        case .image(let bytes, let source):
            let hash = SHA256Digest.hash(bytes)
            guard hash == running else {
                return .failure(
                    DeltaBaseMismatch(
                        "the device runs sha256:\(running.prefix(6).hexString), not \(source) (sha256:\(hash.prefix(6).hexString))"))
            }
            return .success((bytes, source))
        case .store(let store):
            guard let bytes = store.image(sha256: running) else {
                return .failure(
                    DeltaBaseMismatch("bleota holds no copy of the image the device runs (sha256:\(running.prefix(6).hexString)) in \(store.location)"))
            }
            return .success((bytes, "the image bleota sent before (sha256:\(running.prefix(6).hexString))"))
        }
    }

    public static func == (left: DeltaBase, right: DeltaBase) -> Bool {
        guard left.policy == right.policy else { return false }
        switch (left.origin, right.origin) {
        case (.image(let a, let x), .image(let b, let y)): return a == b && x == y
        case (.store(let a), .store(let b)): return a.location == b.location
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(policy)
        switch origin {
        case .image(let bytes, let source):
            hasher.combine(bytes)
            hasher.combine(source)
        case .store(let store): hasher.combine(store.location)
        }
    }
}

/// Why a delta base does not fit the device: one line.
public struct DeltaBaseMismatch: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// An image checked and ready to send: one part, or several that go in order
/// (a Nordic package's SoftDevice and bootloader, then its application).
public struct PreparedImage: Sendable, Hashable {
    public struct Part: Sendable, Hashable {
        /// "application", "softdevice+bootloader".
        public var name: String
        public var data: [UInt8]
        /// What goes before the data (an init packet), if the protocol has such a thing.
        public var metadata: [UInt8]
        /// Values of the part its protocol's host half needs besides the bytes (a
        /// SoftDevice+bootloader image's "softdevice-size"), by name.
        public var attributes: [String: Int]
        /// A part too large to hold, read from its file as it is sent; `data` is then empty.
        public var streamed: StreamedBytes?
        public init(name: String, data: [UInt8], metadata: [UInt8] = [], attributes: [String: Int] = [:]) {
            self.name = name
            self.data = data
            self.metadata = metadata
            self.attributes = attributes
        }

        public init(name: String, streamed: StreamedBytes) {
            self.init(name: name, data: [])
            self.streamed = streamed
        }

        public var count: Int { streamed?.count ?? data.count }
    }

    /// A file read on demand, compared by identity (two opens of one path are two sources).
    public struct StreamedBytes: Sendable, Hashable {
        public let file: FileByteSource
        /// Taken in one pass when the image was prepared.
        public let crc32: UInt32
        public let sha256: [UInt8]
        /// Reads `file` once for its CRC-32 and SHA-256.
        public init(file: FileByteSource) throws(InputFileError) {
            self.file = file
            (crc32, sha256) = try file.digests()
        }
        public var count: Int { file.count }
        public static func == (lhs: StreamedBytes, rhs: StreamedBytes) -> Bool { lhs.file === rhs.file }
        public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(file)) }
    }

    public var parts: [Part]
    /// The image the device is believed to run, from which a protocol that can may send a delta patch
    /// instead of the whole image (`flash --base`); nil: send the image.
    public var deltaBase: DeltaBase?
    /// Send the image only to a device that runs an older one (`flash --no-downgrade`): a protocol
    /// with ``ProtocolCapabilities/refuseDowngrade`` refuses otherwise, before sending, and asks the
    /// device to refuse it too.
    public var refusesDowngrade = false
    /// The versions a device must run to be sent the image (a campaign's or fleet's
    /// `--from-version`); empty: any. A protocol with ``ProtocolCapabilities/versionCohort``
    /// refuses any other with ``TransferError/Code/otherVersion`` before sending
    /// (``otherVersionRefusal(running:)``).
    public var fromVersions: [String] = []

    /// The one image held in memory, or nil for several parts or one read from its file as it is
    /// sent: what a delta patch can be made from or against, and what the store of flashed images keeps.
    public var wholeInMemory: [UInt8]? { parts.count == 1 && parts[0].streamed == nil ? parts[0].data : nil }
    /// What the device must report running afterwards.
    public var version: String
    /// One line for logs: "MCUboot image 1.2.0, hash 3f2a…".
    public var summary: String

    public init(parts: [Part], version: String, summary: String) {
        self.parts = parts
        self.version = version
        self.summary = summary
    }

    /// A single-part image.
    public init(bytes: [UInt8], version: String, summary: String) {
        self.init(parts: [Part(name: "application", data: bytes)], version: version, summary: summary)
    }

    /// The first part's data: the whole image for single-part protocols.
    public var bytes: [UInt8] { parts.first?.data ?? [] }
    public var totalBytes: Int { parts.reduce(0) { $0 + $1.count } }
}

/// An image as its protocol describes it for `bleota image info`: one
/// section per part, each a list of named values, and whether everything
/// that can be checked (hashes, signatures) verified.
///
/// Each field is shown as a line of text and encoded for `--json` as typed
/// values under camelCase keys (`"imageSize": 5000`, not `"5000 bytes"`), so a
/// script never parses display strings.
public struct ImageDescription: Sendable, Hashable, Encodable {
    public struct Part: Sendable, Hashable, Encodable {
        /// "application", "SoftDevice and bootloader".
        public var name: String
        /// Named values in the order they are shown ("firmware version" → "3").
        public var fields: [Field]
        /// Whether the part's image matches the hash its metadata names (nil: nothing to check).
        public var hashMatches: Bool?
        /// Whether its signature verified with the given key (nil: no key given, or unsigned).
        public var signatureVerified: Bool?

        public init(name: String, fields: [Field], hashMatches: Bool? = nil, signatureVerified: Bool? = nil) {
            self.name = name
            self.fields = fields
            self.hashMatches = hashMatches
            self.signatureVerified = signatureVerified
        }

        /// `{"name": …, <each field's typed values>…, "hashMatches": …, "signatureVerified": …}`.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: FieldKey.self)
            try container.encode(name, forKey: FieldKey("name"))
            for field in fields {
                for pair in field.typed { try container.encode(pair.value, forKey: FieldKey(pair.key)) }
            }
            try container.encodeIfPresent(hashMatches, forKey: FieldKey("hashMatches"))
            try container.encodeIfPresent(signatureVerified, forKey: FieldKey("signatureVerified"))
        }
    }

    /// A value of a field in `--json`.
    public enum Value: Sendable, Hashable, Encodable {
        case text(String)
        case integer(Int64)
        case flag(Bool)
        case list([Value])
        /// A nested object (an MCUboot TLV entry): its keys in camelCase.
        case object([Field.TypedValue])
        /// Absent from the input (a field the metadata should have had): `null`.
        case missing

        public func encode(to encoder: any Encoder) throws {
            if case .object(let entries) = self { return try ObjectValue(entries: entries).encode(to: encoder) }
            var container = encoder.singleValueContainer()
            switch self {
            case .text(let text): try container.encode(text)
            case .integer(let number): try container.encode(number)
            case .flag(let flag): try container.encode(flag)
            case .list(let values): try container.encode(values)
            case .object: break  // above
            case .missing: try container.encodeNil()
            }
        }
    }

    /// A list of typed values encoded as one JSON object; an entry whose value is
    /// `.missing` is left out, as an optional is.
    struct ObjectValue: Encodable {
        var entries: [Field.TypedValue]
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: FieldKey.self)
            for entry in entries where entry.value != .missing { try container.encode(entry.value, forKey: FieldKey(entry.key)) }
        }
    }

    /// Metadata inside one plain image (an MCUboot header and its TLVs), as opposed to a
    /// package of parts: `image info` shows the image's own report (format, segments,
    /// size, checksums) and then this, where a package is shown instead of it.
    public struct Embedded: Sendable, Hashable, Encodable {
        /// Its key in `image info --json` ("mcuboot").
        public var key: String
        /// Shown after the image's own lines.
        public var lines: [String]
        /// Its object in `--json`; entries whose value is `.missing` are left out.
        public var entries: [Field.TypedValue]

        public init(key: String, lines: [String], entries: [Field.TypedValue]) {
            self.key = key
            self.lines = lines
            self.entries = entries
        }

        public func encode(to encoder: any Encoder) throws { try ObjectValue(entries: entries).encode(to: encoder) }
    }

    public struct Field: Sendable, Hashable {
        /// The label shown before the value ("firmware version").
        public var name: String
        /// The value as shown ("3", "fw.bin, 5000 bytes").
        public var value: String
        /// The same in `--json`: one or more typed values under camelCase keys.
        public var typed: [TypedValue]

        public struct TypedValue: Sendable, Hashable {
            public var key: String
            public var value: Value
            public init(_ key: String, _ value: Value) {
                self.key = key
                self.value = value
            }
        }

        /// A field shown as `value` and encoded as `typed`.
        public init(_ name: String, _ value: String, typed: [(String, Value)]) {
            self.name = name
            self.value = value
            self.typed = typed.map { TypedValue($0.0, $0.1) }
        }

        /// A field whose text is its value: encoded as text under its name in camelCase.
        public init(_ name: String, _ value: String) {
            self.init(name, value, typed: [(Self.camelCase(name), .text(value))])
        }

        /// A whole number, shown in decimal.
        public init(_ name: String, integer: Int64?) {
            self.init(name, integer.map(String.init) ?? "missing", typed: [(Self.camelCase(name), integer.map(Value.integer) ?? .missing)])
        }

        /// A part's image file: its name and size, CRC-32 and SHA-256 of its bytes
        /// (`image`, `imageSize`, `crc32`, `sha256`), what `image info` gives of any image.
        public static func image(file: String, bytes: [UInt8]) -> [Field] {
            let crc = hex32(CRC32.checksum(bytes))
            let sha = SHA256Digest.hash(bytes).hexString
            return [
                Field("image", "\(file), \(bytes.count) bytes", typed: [("image", .text(file)), ("imageSize", .integer(Int64(bytes.count)))]),
                Field("crc32", crc), Field("sha256", sha),
            ]
        }

        /// A metadata file beside the image (an init packet): `<key>` and `<key>Size`.
        public static func file(_ name: String, file: String, size: Int) -> Field {
            let key = camelCase(name)
            return Field(name, "\(file), \(size) bytes", typed: [(key, .text(file)), (key + "Size", .integer(Int64(size)))])
        }

        /// "firmware version" → "firmwareVersion"; "sd_req" → "sdReq"; "CRC-16" → "crc16".
        public static func camelCase(_ label: String) -> String {
            let words = label.split(whereSeparator: { !$0.isLetter && !$0.isNumber })
            guard let first = words.first else { return label }
            return first.lowercased() + words.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst().lowercased() }.joined()
        }
    }

    /// A JSON key named at run time (a field's camelCase name, an embedded description's key).
    public struct FieldKey: CodingKey {
        public var stringValue: String
        public var intValue: Int? { nil }
        public init(_ key: String) { stringValue = key }
        public init?(stringValue: String) { self.stringValue = stringValue }
        public init?(intValue: Int) { nil }
    }

    /// "Nordic Secure DFU package".
    public var format: String
    public var parts: [Part]
    /// Set when something did not verify: one line naming the part and what to do.
    public var problem: String?
    /// Set for metadata inside a plain image (then `parts` is empty): see ``Embedded``.
    public var embedded: Embedded?

    public init(format: String, parts: [Part], problem: String? = nil) {
        self.format = format
        self.parts = parts
        self.problem = problem
    }

    /// A description of metadata inside a plain image, which `image info` shows after the image's own report.
    public init(format: String, embedded: Embedded, problem: String? = nil) {
        self.init(format: format, parts: [], problem: problem)
        self.embedded = embedded
    }

    /// The description as text, one field a line.
    public var lines: [String] {
        var lines = ["format:    \(format)"]
        for part in parts {
            lines.append("part:      \(part.name)")
            let width = max(16, (part.fields.map(\.name.count).max() ?? 0) + 2)
            for field in part.fields {
                lines.append("  " + (field.name + ":").padding(toLength: width, withPad: " ", startingAt: 0) + field.value)
            }
            if let matches = part.hashMatches {
                lines.append("  " + "hash:".padding(toLength: width, withPad: " ", startingAt: 0) + (matches ? "matches the image" : "DOES NOT MATCH the image"))
            }
            if let verified = part.signatureVerified {
                lines.append("  " + "signature:".padding(toLength: width, withPad: " ", startingAt: 0) + (verified ? "verified with the key" : "DOES NOT VERIFY with the key"))
            }
        }
        return lines
    }
}

extension PreparedImage {
    /// The refusal owed to a device that runs `running` when the image is only for
    /// ``fromVersions``; nil when it may be sent, or when the device already runs this image (an
    /// update that is done is reported as such, not as another version's).
    public func otherVersionRefusal(running: String?) -> TransferError? {
        guard !fromVersions.isEmpty, running != version else { return nil }
        if let running, fromVersions.contains(running) { return nil }
        let listed = fromVersions.joined(separator: ", ")
        var error = TransferError(
            .otherVersion, step: .connect,
            running.map { "the device runs \($0), not one of --from-version \(listed): nothing was sent" }
                ?? "the device reports no version, and the image is only for --from-version \(listed): nothing was sent")
        error.outcome = .oldImage(running ?? DeviceOutcome.unnamedOldImage)
        return error
    }
}
