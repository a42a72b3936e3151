import BleotaCodec

/// A request bleota sends (and its device half serves), naming the response
/// it expects, so a client call is typed end to end: the body is encoded and
/// the answer decoded into a struct once, in one place.
public protocol SMPRequest: Sendable {
    associatedtype Response: SMPResponse
    static var command: SMPCommand { get }
    static var operation: SMPHeader.Operation { get }
    /// For messages: "the echo request".
    var what: String { get }
    var body: CBOR { get }
}

/// An answer's body as a value; decoding is strict about types and lenient
/// about extra keys, as MCUmgr clients are.
public protocol SMPResponse: Sendable {
    init(body: CBOR) throws(SMPBody.FieldError)
    var body: CBOR { get }
}

/// An answer that carries nothing but success.
public struct SMPEmptyResponse: SMPResponse, Hashable {
    public init() {}
    public init(body: CBOR) throws(SMPBody.FieldError) {}
    public var body: CBOR { .map([]) }
}

/// Field-level decoding of SMP bodies, with errors that name the field.
public enum SMPBody {
    public struct FieldError: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    static func int(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> Int {
        guard let value = try optionalInt(body, key, in: what) else { throw FieldError("\(what) lacks '\(key)'") }
        return value
    }

    static func optionalInt(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> Int? {
        guard let value = body[key] else { return nil }
        guard let int = value.int else { throw FieldError("\(what)'s '\(key)' is \(value), not an integer") }
        return int
    }

    static func text(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> String {
        guard let value = try optionalText(body, key, in: what) else { throw FieldError("\(what) lacks a text '\(key)'") }
        return value
    }

    static func optionalText(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> String? {
        guard let value = body[key] else { return nil }
        guard let text = value.string else { throw FieldError("\(what)'s '\(key)' is \(value), not text") }
        return text
    }

    static func bytes(_ body: CBOR, _ key: String, in what: String) throws(FieldError) -> [UInt8] {
        guard let value = try optionalBytes(body, key, in: what) else { throw FieldError("\(what) lacks '\(key)'") }
        return value
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

    /// A map built from the pairs whose value is present, in order.
    static func map(_ pairs: [(String, CBOR?)]) -> CBOR {
        .map(pairs.compactMap { key, value in value.map { (key: CBOR.text(key), value: $0) } })
    }
}
