import BleotaCodec

/// The bodies of the SMP commands bleota sends and serves, as values with a
/// CBOR form each way. Decoding is strict about types (a `len` that is text
/// is an error naming the field) and lenient about extra keys, as MCUmgr
/// clients are.
public enum SMPBody {
    public struct FieldError: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    static func int(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> Int {
        guard let value = body[key] else { throw FieldError("\(what) lacks '\(key)'") }
        guard let int = value.int else { throw FieldError("\(what)'s '\(key)' is \(value), not an integer") }
        return int
    }

    static func optionalInt(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> Int? {
        guard let value = body[key] else { return nil }
        guard let int = value.int else { throw FieldError("\(what)'s '\(key)' is \(value), not an integer") }
        return int
    }

    static func optionalBytes(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> [UInt8]? {
        guard let value = body[key] else { return nil }
        guard let bytes = value.byteString else { throw FieldError("\(what)'s '\(key)' is \(value), not a byte string") }
        return bytes
    }

    static func optionalBool(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> Bool? {
        guard let value = body[key] else { return nil }
        guard let bool = value.boolean else { throw FieldError("\(what)'s '\(key)' is \(value), not a boolean") }
        return bool
    }
}

/// OS group, command 6: the device's SMP buffer size and count.
public struct MCUmgrParameters: Sendable, Hashable {
    public var bufferSize: Int
    public var bufferCount: Int

    public init(bufferSize: Int, bufferCount: Int) {
        self.bufferSize = bufferSize
        self.bufferCount = bufferCount
    }

    public var body: CBOR { .textMap(["buf_size": CBOR(bufferSize), "buf_count": CBOR(bufferCount)]) }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        bufferSize = try SMPBody.int(body, "buf_size", in: "the MCUmgr parameters")
        bufferCount = try SMPBody.int(body, "buf_count", in: "the MCUmgr parameters")
        guard bufferSize >= 64, bufferCount >= 1 else {
            throw SMPBody.FieldError("the MCUmgr parameters (buffer \(bufferSize) × \(bufferCount)) are too small to upload with")
        }
    }
}

/// One slot in the image group's state list.
public struct SMPImageSlot: Sendable, Hashable, Codable {
    public var image: Int
    public var slot: Int
    public var version: String
    public var hash: [UInt8]
    public var bootable: Bool
    public var pending: Bool
    public var confirmed: Bool
    public var active: Bool
    public var permanent: Bool

    public init(image: Int = 0, slot: Int, version: String, hash: [UInt8], bootable: Bool = true, pending: Bool = false,
                confirmed: Bool = false, active: Bool = false, permanent: Bool = false) {
        self.image = image
        self.slot = slot
        self.version = version
        self.hash = hash
        self.bootable = bootable
        self.pending = pending
        self.confirmed = confirmed
        self.active = active
        self.permanent = permanent
    }

    /// As Zephyr sends it: the flags always present, `image` only with more than one image.
    public var body: CBOR {
        .textMap(["slot": CBOR(slot), "version": .text(version), "hash": .bytes(hash), "bootable": .bool(bootable),
                  "pending": .bool(pending), "confirmed": .bool(confirmed), "active": .bool(active),
                  "permanent": .bool(permanent)])
    }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "an image slot"
        image = try SMPBody.optionalInt(body, "image", in: what) ?? 0
        slot = try SMPBody.int(body, "slot", in: what)
        guard let version = body["version"]?.string else { throw SMPBody.FieldError("\(what) lacks a text 'version'") }
        self.version = version
        hash = try SMPBody.optionalBytes(body, "hash", in: what) ?? []
        bootable = try SMPBody.optionalBool(body, "bootable", in: what) ?? false
        pending = try SMPBody.optionalBool(body, "pending", in: what) ?? false
        confirmed = try SMPBody.optionalBool(body, "confirmed", in: what) ?? false
        active = try SMPBody.optionalBool(body, "active", in: what) ?? false
        permanent = try SMPBody.optionalBool(body, "permanent", in: what) ?? false
    }

    public static func list(from body: CBOR) throws(SMPBody.FieldError) -> [SMPImageSlot] {
        guard let images = body["images"]?.elements else { throw SMPBody.FieldError("the image state lacks an 'images' array") }
        var slots: [SMPImageSlot] = []
        for image in images { slots.append(try SMPImageSlot(body: image)) }
        return slots
    }

    public static func listBody(_ slots: [SMPImageSlot]) -> CBOR {
        .textMap(["images": .array(slots.map(\.body)), "splitStatus": CBOR(0)])
    }
}

/// Image group, command 1: one chunk of an upload.
public struct SMPUploadRequest: Sendable, Hashable {
    public var image: Int
    public var offset: Int
    public var data: [UInt8]
    /// Only in the first chunk (offset 0).
    public var length: Int?
    public var sha: [UInt8]?
    public var upgrade: Bool?

    public init(image: Int = 0, offset: Int, data: [UInt8], length: Int? = nil, sha: [UInt8]? = nil, upgrade: Bool? = nil) {
        self.image = image
        self.offset = offset
        self.data = data
        self.length = length
        self.sha = sha
        self.upgrade = upgrade
    }

    public var body: CBOR {
        var pairs: [(key: CBOR, value: CBOR)] = []
        if offset == 0 { pairs.append((.text("image"), CBOR(image))) }
        if let length { pairs.append((.text("len"), CBOR(length))) }
        pairs.append((.text("off"), CBOR(offset)))
        if let sha { pairs.append((.text("sha"), .bytes(sha))) }
        pairs.append((.text("data"), .bytes(data)))
        if let upgrade { pairs.append((.text("upgrade"), .bool(upgrade))) }
        return .map(pairs)
    }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the upload request"
        offset = try SMPBody.int(body, "off", in: what)
        guard offset >= 0 else { throw SMPBody.FieldError("\(what)'s 'off' is negative") }
        guard let data = try SMPBody.optionalBytes(body, "data", in: what) else { throw SMPBody.FieldError("\(what) lacks 'data'") }
        self.data = data
        image = try SMPBody.optionalInt(body, "image", in: what) ?? 0
        length = try SMPBody.optionalInt(body, "len", in: what)
        sha = try SMPBody.optionalBytes(body, "sha", in: what)
        upgrade = try SMPBody.optionalBool(body, "upgrade", in: what)
    }

    /// Bytes of CBOR a chunk of `dataSize` adds to its request, beyond the data
    /// itself, for an offset up to `maximumOffset`; the first chunk carries
    /// `image`, `len`, `sha` and `upgrade` too.
    public static func overhead(dataSize: Int, maximumOffset: Int, first: Bool) -> Int {
        let probe = SMPUploadRequest(offset: first ? 0 : max(1, maximumOffset), data: [],
                                     length: first ? maximumOffset : nil, sha: first ? [UInt8](repeating: 0, count: 32) : nil,
                                     upgrade: first ? false : nil)
        // The data's own head grows with its length: 1, 2, 3 or 5 bytes.
        let dataHead = dataSize < 24 ? 1 : dataSize < 256 ? 2 : dataSize < 65_536 ? 3 : 5
        return SMPHeader.size + probe.body.encode().count - 1 + dataHead
    }
}

/// File-system group, command 0 (write): one chunk of a file upload.
public struct SMPFileUploadRequest: Sendable, Hashable {
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

    public var body: CBOR {
        var pairs: [(key: CBOR, value: CBOR)] = [(.text("name"), .text(name)), (.text("off"), CBOR(offset))]
        if let length { pairs.append((.text("len"), CBOR(length))) }
        pairs.append((.text("data"), .bytes(data)))
        return .map(pairs)
    }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the file upload request"
        guard let name = body["name"]?.string else { throw SMPBody.FieldError("\(what) lacks a text 'name'") }
        self.name = name
        offset = try SMPBody.int(body, "off", in: what)
        guard let data = try SMPBody.optionalBytes(body, "data", in: what) else { throw SMPBody.FieldError("\(what) lacks 'data'") }
        self.data = data
        length = try SMPBody.optionalInt(body, "len", in: what)
    }
}
