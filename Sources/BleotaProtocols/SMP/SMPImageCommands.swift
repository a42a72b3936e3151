import BleotaCodec
import BleotaEngine

/// One slot in the image group's state list: the protocol-independent
/// ``/BleotaEngine/ImageSlotState`` `image state` prints, with SMP's encoding added below.
public typealias SMPImageSlot = ImageSlotState

extension ImageSlotState {
    /// As Zephyr sends it: the flags always present, `image` only on a device with more than one
    /// image (`numbered`; an entry of image 1 or later is numbered whatever it is told).
    public var body: CBOR { body(numbered: image != 0) }

    public func body(numbered: Bool) -> CBOR {
        SMPBody.map([
            ("image", numbered || image != 0 ? CBOR(image) : nil), ("slot", CBOR(slot)), ("version", .text(version)),
            ("hash", .bytes(hash)), ("bootable", .bool(bootable)), ("pending", .bool(pending)), ("confirmed", .bool(confirmed)),
            ("active", .bool(active)), ("permanent", .bool(permanent)),
        ])
    }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "an image slot"
        guard let version = body["version"]?.string else { throw SMPBody.FieldError("\(what) lacks a text 'version'") }
        self.init(
            image: try SMPBody.optionalInt(body, "image", in: what) ?? 0,
            slot: try SMPBody.int(body, "slot", in: what),
            version: version,
            hash: try SMPBody.optionalBytes(body, "hash", in: what) ?? [],
            bootable: try SMPBody.optionalBool(body, "bootable", in: what) ?? false,
            pending: try SMPBody.optionalBool(body, "pending", in: what) ?? false,
            confirmed: try SMPBody.optionalBool(body, "confirmed", in: what) ?? false,
            active: try SMPBody.optionalBool(body, "active", in: what) ?? false,
            permanent: try SMPBody.optionalBool(body, "permanent", in: what) ?? false)
    }

    public static func list(from body: CBOR) throws(SMPBody.FieldError) -> [SMPImageSlot] {
        try SMPImageStateResponse(body: body).slots
    }

    public static func listBody(_ slots: [SMPImageSlot], numbered: Bool = false) -> CBOR {
        SMPImageStateResponse(slots: slots, numbered: numbered).body
    }
}

/// Image group, command 0 (read): the slots.
public struct SMPImageStateRequest: SMPRequest, Hashable {
    public typealias Response = SMPImageStateResponse
    public static let command = SMPCommand.imageState
    public static let operation = SMPHeader.Operation.read
    public init() {}
    public var what: String { "the image state request" }
    public var body: CBOR { .map([]) }
}

/// Image group, command 0 (write): mark the image with `hash` for a test
/// boot (`confirm` false) or permanently, or confirm the running image (no hash).
public struct SMPImageStateWriteRequest: SMPRequest, Hashable {
    public typealias Response = SMPImageStateResponse
    public static let command = SMPCommand.imageState
    public static let operation = SMPHeader.Operation.write
    public var hash: [UInt8]?
    public var confirm: Bool
    public init(hash: [UInt8]?, confirm: Bool) {
        self.hash = hash
        self.confirm = confirm
    }
    public var what: String { confirm ? "the confirm request" : "the test request" }
    public var body: CBOR { SMPBody.map([("hash", hash.map(CBOR.bytes)), ("confirm", .bool(confirm))]) }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the image state request"
        hash = try SMPBody.optionalBytes(body, "hash", in: what)
        confirm = try SMPBody.optionalBool(body, "confirm", in: what) ?? false
    }
}

public struct SMPImageStateResponse: SMPResponse, Hashable {
    public var slots: [SMPImageSlot]
    public var splitStatus: Int?
    /// Whether every entry carries `image` (a device with several images), as Zephyr encodes it.
    public var numbered: Bool
    public init(slots: [SMPImageSlot], splitStatus: Int? = 0, numbered: Bool = false) {
        self.slots = slots
        self.splitStatus = splitStatus
        self.numbered = numbered || slots.contains { $0.image != 0 }
    }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        guard let images = body["images"]?.elements else { throw SMPBody.FieldError("the image state lacks an 'images' array") }
        var slots: [SMPImageSlot] = []
        for image in images { slots.append(try SMPImageSlot(body: image)) }
        self.slots = slots
        splitStatus = try SMPBody.optionalInt(body, "splitStatus", in: "the image state")
        numbered = images.contains { $0["image"] != nil }
    }
    public var body: CBOR {
        SMPBody.map([("images", .array(slots.map { $0.body(numbered: numbered) })), ("splitStatus", splitStatus.map { CBOR($0) })])
    }
}

/// Image group, command 1: one chunk of an upload.
public struct SMPUploadRequest: SMPRequest, Hashable {
    public typealias Response = SMPUploadResponse
    public static let command = SMPCommand.imageUpload
    public static let operation = SMPHeader.Operation.write
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

    public var what: String { "the upload request at \(offset)" }

    public var body: CBOR {
        var pairs: [(key: CBOR, value: CBOR)] = []
        if offset == 0 { pairs.append((.text("image"), CBOR(image))) }
        if let length { pairs.append((.text("len"), CBOR(length))) }
        if let sha { pairs.append((.text("sha"), .bytes(sha))) }
        if let upgrade { pairs.append((.text("upgrade"), .bool(upgrade))) }
        pairs.append((.text("data"), .bytes(data)))
        // `off` last, right after the data: a request glued from the remains of a
        // lost write and whatever came next ends in bytes that are not `off`, so
        // the device refuses it instead of writing shifted data (protocols/smp.md, "Upload").
        pairs.append((.text("off"), CBOR(offset)))
        return .map(pairs)
    }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the upload request"
        offset = try SMPBody.int(body, "off", in: what)
        guard offset >= 0 else { throw SMPBody.FieldError("\(what)'s 'off' is negative") }
        data = try SMPBody.bytes(body, "data", in: what)
        image = try SMPBody.optionalInt(body, "image", in: what) ?? 0
        length = try SMPBody.optionalInt(body, "len", in: what)
        sha = try SMPBody.optionalBytes(body, "sha", in: what)
        upgrade = try SMPBody.optionalBool(body, "upgrade", in: what)
    }

    /// Bytes a chunk of `dataSize` adds to its request on the wire (header
    /// and CBOR), beyond the data itself, for an offset up to `maximumOffset`;
    /// the first chunk carries `image`, `len`, `sha` and `upgrade` too.
    public static func overhead(dataSize: Int, maximumOffset: Int, first: Bool) -> Int {
        let probe = SMPUploadRequest(
            offset: first ? 0 : max(1, maximumOffset), data: [],
            length: first ? maximumOffset : nil, sha: first ? [UInt8](repeating: 0, count: 32) : nil,
            upgrade: first ? false : nil)
        // The data's own head grows with its length: 1, 2, 3 or 5 bytes.
        let dataHead = dataSize < 24 ? 1 : dataSize < 256 ? 2 : dataSize < 65_536 ? 3 : 5
        return SMPHeader.size + probe.body.encode().count - 1 + dataHead
    }

    /// The most data bytes a request whose encoding must fit `bytes` can carry.
    public static func dataCapacity(within bytes: Int, maximumOffset: Int, first: Bool) -> Int {
        var data = max(0, bytes - overhead(dataSize: 0, maximumOffset: maximumOffset, first: first))
        while data > 0, data + overhead(dataSize: data, maximumOffset: maximumOffset, first: first) > bytes { data -= 1 }
        return data
    }
}

/// The answer to an upload chunk: where the device stands now, and once the
/// last chunk is in, whether the whole upload matched the `sha` of the first.
public struct SMPUploadResponse: SMPResponse, Hashable {
    public var offset: Int
    public var match: Bool?
    public init(offset: Int, match: Bool? = nil) {
        self.offset = offset
        self.match = match
    }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        offset = try SMPBody.int(body, "off", in: "the upload answer")
        match = try SMPBody.optionalBool(body, "match", in: "the upload answer")
    }
    public var body: CBOR { SMPBody.map([("off", CBOR(offset)), ("match", match.map(CBOR.bool))]) }
}

/// Image group, command 5: erase a slot (the secondary by default).
public struct SMPImageEraseRequest: SMPRequest, Hashable {
    public typealias Response = SMPEmptyResponse
    public static let command = SMPCommand.imageErase
    public static let operation = SMPHeader.Operation.write
    public var slot: Int?
    public init(slot: Int? = 1) { self.slot = slot }
    public var what: String { "the erase request" }
    public var body: CBOR { SMPBody.map([("slot", slot.map { CBOR($0) })]) }
    public init(body: CBOR) throws(SMPBody.FieldError) { slot = try SMPBody.optionalInt(body, "slot", in: "the erase request") }
}
