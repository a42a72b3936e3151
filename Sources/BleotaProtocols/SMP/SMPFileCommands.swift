import BleotaCodec

/// File-system group, command 0 (write): one chunk of a file upload.
public struct SMPFileUploadRequest: SMPRequest, Hashable {
    public typealias Response = SMPFileOffsetResponse
    public static let command = SMPCommand.file
    public static let operation = SMPHeader.Operation.write
    public var name: String
    public var offset: Int
    public var data: [UInt8]
    public var length: Int?

    public init(name: String, offset: Int, data: [UInt8], length: Int? = nil) {
        self.name = name
        self.offset = offset
        self.data = data
        self.length = length
    }

    public var what: String { "the file upload at \(offset)" }

    public var body: CBOR {
        var pairs: [(key: CBOR, value: CBOR)] = [(.text("name"), .text(name)), (.text("off"), CBOR(offset))]
        if let length { pairs.append((.text("len"), CBOR(length))) }
        pairs.append((.text("data"), .bytes(data)))
        return .map(pairs)
    }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the file upload request"
        name = try SMPBody.text(body, "name", in: what)
        offset = try SMPBody.int(body, "off", in: what)
        data = try SMPBody.bytes(body, "data", in: what)
        length = try SMPBody.optionalInt(body, "len", in: what)
    }
}

/// Where a file upload stands.
public struct SMPFileOffsetResponse: SMPResponse, Hashable {
    public var offset: Int
    public init(offset: Int) { self.offset = offset }
    public init(body: CBOR) throws(SMPBody.FieldError) { offset = try SMPBody.int(body, "off", in: "the file upload answer") }
    public var body: CBOR { .textMap(["off": CBOR(offset)]) }
}

/// File-system group, command 0 (read): one chunk of a download.
public struct SMPFileDownloadRequest: SMPRequest, Hashable {
    public typealias Response = SMPFileDownloadResponse
    public static let command = SMPCommand.file
    public static let operation = SMPHeader.Operation.read
    public var name: String
    public var offset: Int
    public init(name: String, offset: Int) {
        self.name = name
        self.offset = offset
    }
    public var what: String { "the file download at \(offset)" }
    public var body: CBOR { .textMap(["name": .text(name), "off": CBOR(offset)]) }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the file download request"
        name = try SMPBody.text(body, "name", in: what)
        offset = try SMPBody.int(body, "off", in: what)
    }
}

public struct SMPFileDownloadResponse: SMPResponse, Hashable {
    public var offset: Int
    public var data: [UInt8]
    /// The file's length, in the first answer only.
    public var length: Int?
    public init(offset: Int, data: [UInt8], length: Int? = nil) {
        self.offset = offset
        self.data = data
        self.length = length
    }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the download answer"
        offset = try SMPBody.int(body, "off", in: what)
        data = try SMPBody.bytes(body, "data", in: what)
        length = try SMPBody.optionalInt(body, "len", in: what)
    }
    public var body: CBOR { SMPBody.map([("off", CBOR(offset)), ("data", .bytes(data)), ("len", length.map { CBOR($0) })]) }
}

/// File-system group, command 1: a file's length.
public struct SMPFileStatusRequest: SMPRequest, Hashable {
    public typealias Response = SMPFileStatus
    public static let command = SMPCommand.fileStatus
    public static let operation = SMPHeader.Operation.read
    public var name: String
    public init(name: String) { self.name = name }
    public var what: String { "the file status request" }
    public var body: CBOR { .textMap(["name": .text(name)]) }
    public init(body: CBOR) throws(SMPBody.FieldError) { name = try SMPBody.text(body, "name", in: "the file status request") }
}

public struct SMPFileStatus: SMPResponse, Hashable {
    public var length: Int
    public init(length: Int) { self.length = length }
    public init(body: CBOR) throws(SMPBody.FieldError) { length = try SMPBody.int(body, "len", in: "the file status") }
    public var body: CBOR { .textMap(["len": CBOR(length)]) }
}

/// File-system group, command 2: a hash or checksum of (part of) a file.
public struct SMPFileHashRequest: SMPRequest, Hashable {
    public typealias Response = SMPFileHash
    public static let command = SMPCommand.fileHash
    public static let operation = SMPHeader.Operation.read
    public var name: String
    /// "sha256" or "crc32"; the device's default (CRC-32) when nil.
    public var type: String?
    public var offset: Int?
    public var length: Int?
    public init(name: String, type: String? = nil, offset: Int? = nil, length: Int? = nil) {
        self.name = name
        self.type = type
        self.offset = offset
        self.length = length
    }
    public var what: String { "the file hash request" }
    public var body: CBOR {
        SMPBody.map([("name", .text(name)), ("type", type.map(CBOR.text)), ("off", offset.map { CBOR($0) }), ("len", length.map { CBOR($0) })])
    }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the file hash request"
        name = try SMPBody.text(body, "name", in: what)
        type = try SMPBody.optionalText(body, "type", in: what)
        offset = try SMPBody.optionalInt(body, "off", in: what)
        length = try SMPBody.optionalInt(body, "len", in: what)
    }
}

public struct SMPFileHash: SMPResponse, Hashable {
    public var type: String
    public var offset: Int
    public var length: Int
    /// A byte string for hashes, an integer for checksums.
    public var output: CBOR
    public init(type: String, offset: Int, length: Int, output: CBOR) {
        self.type = type
        self.offset = offset
        self.length = length
        self.output = output
    }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the file hash answer"
        type = try SMPBody.text(body, "type", in: what)
        offset = try SMPBody.optionalInt(body, "off", in: what) ?? 0
        length = try SMPBody.int(body, "len", in: what)
        guard let output = body["output"] else { throw SMPBody.FieldError("\(what) lacks 'output'") }
        self.output = output
    }
    public var body: CBOR { .textMap(["type": .text(type), "off": CBOR(offset), "len": CBOR(length), "output": output]) }
}

/// File-system group, command 3: the hash and checksum types the device supports.
public struct SMPFileHashTypesRequest: SMPRequest, Hashable {
    public typealias Response = SMPFileHashTypes
    public static let command = SMPCommand.fileHashTypes
    public static let operation = SMPHeader.Operation.read
    public init() {}
    public var what: String { "the supported hash types request" }
    public var body: CBOR { .map([]) }
}

public struct SMPFileHashTypes: SMPResponse, Hashable {
    public struct Kind: Sendable, Hashable {
        /// 0: a number; 1: a byte string.
        public var format: Int
        public var size: Int
        public init(format: Int, size: Int) {
            self.format = format
            self.size = size
        }
    }
    /// By name, in the order the device lists them.
    public var types: [(name: String, kind: Kind)]
    public init(types: [(name: String, kind: Kind)]) { self.types = types }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        guard case .map(let pairs)? = body["types"] else { throw SMPBody.FieldError("the supported hash types lack a 'types' map") }
        var types: [(name: String, kind: Kind)] = []
        for (key, value) in pairs {
            guard let name = key.string else { throw SMPBody.FieldError("a supported hash type's name is \(key), not text") }
            let what = "hash type '\(name)'"
            types.append((name, Kind(format: try SMPBody.int(value, "format", in: what), size: try SMPBody.int(value, "size", in: what))))
        }
        self.types = types
    }
    public var body: CBOR {
        .textMap(["types": .map(types.map { (key: CBOR.text($0.name), value: CBOR.textMap(["format": CBOR($0.kind.format), "size": CBOR($0.kind.size)])) })])
    }
    public static func == (lhs: SMPFileHashTypes, rhs: SMPFileHashTypes) -> Bool {
        lhs.types.map(\.name) == rhs.types.map(\.name) && lhs.types.map(\.kind) == rhs.types.map(\.kind)
    }
    public func hash(into hasher: inout Hasher) {
        for entry in types {
            hasher.combine(entry.name)
            hasher.combine(entry.kind)
        }
    }
}

/// File-system group, command 4: close the file an upload or download left open.
public struct SMPFileCloseRequest: SMPRequest, Hashable {
    public typealias Response = SMPEmptyResponse
    public static let command = SMPCommand.fileClose
    public static let operation = SMPHeader.Operation.write
    public init() {}
    public var what: String { "the file close request" }
    public var body: CBOR { .map([]) }
}
