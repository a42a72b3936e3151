import BleotaATT
import BleotaCodec
import BleotaEngine
import Foundation
import Yams

/// A mistake in a protocol description, said in one line: the file, the line,
/// the field (as a path: `transfer.flow.every`), what is wrong and what to write.
public struct ProtocolDescriptionError: Error, Sendable, Equatable, CustomStringConvertible {
    public var source: String
    public var line: Int?
    public var field: String
    public var problem: String

    public init(source: String, line: Int?, field: String, problem: String) {
        self.source = source
        self.line = line
        self.field = field
        self.problem = problem
    }

    public var description: String {
        let place = line.map { "\(source):\($0)" } ?? source
        return field.isEmpty ? "\(place): \(problem)" : "\(place): \(field): \(problem)"
    }
}

extension ProtocolDescription {
    /// The format's version; a file names it as `bleota-protocol: 1`.
    public static let formatVersion = 1

    /// Variables a host fills in when it sends a command.
    public static let commandVariables: Set<String> = [
        "image-size", "image-crc32", "image-crc16", "packet-count", "last-index", "payload-size", "version",
    ]
    /// Variables a data packet may carry besides those.
    public static let packetVariables: Set<String> = ["index", "offset"]

    /// Reads the description in the file at `path`.
    public init(contentsOf path: String) throws(ProtocolDescriptionError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ProtocolDescriptionError(
                source: path, line: nil, field: "",
                problem: "cannot read the protocol description: check the path")
        }
        guard data.count <= 1 << 20, let text = String(data: data, encoding: .utf8) else {
            throw ProtocolDescriptionError(
                source: path, line: nil, field: "",
                problem: "is not a protocol description (not UTF-8 text of at most 1 MiB)")
        }
        try self.init(yaml: text, source: path)
    }

    /// Reads a description from YAML text; `source` names it in errors.
    public init(yaml: String, source: String) throws(ProtocolDescriptionError) {
        let root: Node
        do {
            guard let node = try Yams.compose(yaml: yaml) else {
                throw ProtocolDescriptionError(source: source, line: nil, field: "", problem: "is empty: start from protocols/telink-ota.yaml")
            }
            root = node
        } catch let error as ProtocolDescriptionError {
            throw error
        } catch let error as YamlError {
            throw ProtocolDescriptionError(source: source, line: Self.line(of: error), field: "", problem: "is not valid YAML (\(Self.summary(of: error)))")
        } catch {
            throw ProtocolDescriptionError(source: source, line: nil, field: "", problem: "is not valid YAML (\(error))")
        }
        var reader = DescriptionReader(source: source)
        self = try reader.description(root)
    }

    static func line(of error: YamlError) -> Int? {
        switch error {
        case .scanner(_, _, let mark, _), .parser(_, _, let mark, _), .composer(_, _, let mark, _): mark.line
        default: nil
        }
    }

    static func summary(of error: YamlError) -> String {
        switch error {
        case .scanner(_, let problem, _, _), .parser(_, let problem, _, _), .composer(_, let problem, _, _): problem
        default: "\(error)".split(separator: "\n").first.map(String.init) ?? "unreadable"
        }
    }
}

/// Walks the YAML tree, keeping the path of the field it is in for errors.
struct DescriptionReader {
    let source: String

    func fail(_ node: Node?, _ field: String, _ problem: String) -> ProtocolDescriptionError {
        ProtocolDescriptionError(source: source, line: node?.mark?.line, field: field, problem: problem)
    }

    func mapping(_ node: Node, _ field: String, keys: Set<String>) throws(ProtocolDescriptionError) -> [String: Node] {
        guard case .mapping(let mapping) = node else { throw fail(node, field, "must be a mapping of keys to values") }
        var result: [String: Node] = [:]
        for (key, value) in mapping {
            guard let name = key.string else { throw fail(key, field, "has a key that is not text") }
            guard keys.contains(name) else {
                throw fail(key, field.isEmpty ? name : "\(field).\(name)", "is not a key here: use \(keys.sorted().joined(separator: ", "))")
            }
            result[name] = value
        }
        return result
    }

    func text(_ node: Node?, _ field: String) throws(ProtocolDescriptionError) -> String {
        guard let node, case .scalar(let scalar) = node, !scalar.string.isEmpty else { throw fail(node, field, "needs a text value") }
        return scalar.string
    }

    func required(_ map: [String: Node], _ key: String, in parent: Node, _ field: String) throws(ProtocolDescriptionError) -> Node {
        guard let node = map[key] else { throw fail(parent, field.isEmpty ? key : "\(field).\(key)", "is missing") }
        return node
    }

    func number(_ node: Node?, _ field: String, in range: ClosedRange<UInt64> = 0...UInt64.max) throws(ProtocolDescriptionError) -> UInt64 {
        let value = try text(node, field)
        guard let parsed = Self.parseNumber(value) else { throw fail(node, field, "needs a number (decimal or 0x hex), got '\(value)'") }
        guard range.contains(parsed) else { throw fail(node, field, "\(value) is out of range: use \(range.lowerBound)…\(range.upperBound)") }
        return parsed
    }

    static func parseNumber(_ text: String) -> UInt64? {
        let trimmed = text.replacingOccurrences(of: "_", with: "")
        if trimmed.lowercased().hasPrefix("0x") { return UInt64(trimmed.dropFirst(2), radix: 16) }
        return UInt64(trimmed)
    }

    func flag(_ node: Node?, _ field: String) throws(ProtocolDescriptionError) -> Bool {
        switch try text(node, field).lowercased() {
        case "true", "yes": return true
        case "false", "no": return false
        case let other: throw fail(node, field, "needs true or false, got '\(other)'")
        }
    }

    func duration(_ node: Node?, _ field: String) throws(ProtocolDescriptionError) -> Duration {
        let value = try text(node, field)
        let (digits, scale): (Substring, Double) =
            value.hasSuffix("ms") ? (value.dropLast(2), 0.001) : value.hasSuffix("s") ? (value.dropLast(), 1) : (value[...], 1)
        guard let amount = Double(digits.trimmingCharacters(in: .whitespaces)), amount > 0, amount * scale <= 3600 else {
            throw fail(node, field, "needs a time such as 500ms or 2s (at most an hour), got '\(value)'")
        }
        return .milliseconds(Int64((amount * scale * 1000).rounded()))
    }

    func choice<T: RawRepresentable>(_ node: Node?, _ field: String, _: T.Type) throws(ProtocolDescriptionError) -> T
    where T.RawValue == String, T: CaseIterable {
        let value = try text(node, field)
        guard let parsed = T(rawValue: value) else {
            throw fail(node, field, "'\(value)' is not one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return parsed
    }

    func list(_ node: Node?, _ field: String) throws(ProtocolDescriptionError) -> [Node] {
        guard let node else { return [] }
        guard case .sequence(let sequence) = node else { throw fail(node, field, "must be a list") }
        return Array(sequence)
    }

    // MARK: The whole description

    mutating func description(_ root: Node) throws(ProtocolDescriptionError) -> ProtocolDescription {
        let top = try mapping(
            root, "",
            keys: [
                "bleota-protocol", "name", "display-name", "summary", "chips", "service",
                "characteristics", "messages", "image", "update", "transfer", "statuses",
            ])
        let version = try number(try required(top, "bleota-protocol", in: root, ""), "bleota-protocol")
        guard version == ProtocolDescription.formatVersion else {
            throw fail(top["bleota-protocol"], "bleota-protocol", "this bleota reads format 1, not \(version)")
        }
        let name = try text(try required(top, "name", in: root, ""), "name")
        guard name.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" }), name.first?.isLetter == true else {
            throw fail(top["name"], "name", "'\(name)' must be lower-case letters, digits and '-', starting with a letter (it is the --protocol name)")
        }
        let service = try uuid(try required(top, "service", in: root, ""), "service")
        let characteristics = try characteristics(try required(top, "characteristics", in: root, ""))
        let messages = try messages(try required(top, "messages", in: root, ""), characteristics: characteristics)
        let statuses = try statuses(top["statuses"])
        let image = try image(top["image"])
        let update = try update(try required(top, "update", in: root, ""), messages: messages)
        let transfer = try transfer(try required(top, "transfer", in: root, ""), messages: messages, characteristics: characteristics)
        let result = ProtocolDescription(
            name: name, displayName: try top["display-name"].map { node throws(ProtocolDescriptionError) in try text(node, "display-name") } ?? name,
            summary: try top["summary"].map { node throws(ProtocolDescriptionError) in try text(node, "summary") } ?? "described in \(source)",
            chips: try list(top["chips"], "chips").map { node throws(ProtocolDescriptionError) in try text(node, "chips") },
            service: service, characteristics: characteristics, messages: messages, image: image, update: update,
            transfer: transfer, statuses: statuses, source: source)
        try check(result, root: root, top: top)
        return result
    }

    func uuid(_ node: Node, _ field: String) throws(ProtocolDescriptionError) -> BluetoothUUID {
        let value = try text(node, field)
        let parsed: BluetoothUUID? =
            if value.count == 4 || (value.lowercased().hasPrefix("0x") && value.count == 6) {
                UInt16(value.lowercased().hasPrefix("0x") ? String(value.dropFirst(2)) : value, radix: 16).map(BluetoothUUID.bit16)
            } else {
                BluetoothUUID(value)
            }
        guard let parsed else { throw fail(node, field, "'\(value)' is not a UUID: write 1234 or 12345678-1234-5678-1234-56789abcdef0") }
        return parsed
    }

    func characteristics(_ node: Node) throws(ProtocolDescriptionError) -> [ProtocolDescription.Characteristic] {
        guard case .mapping(let mapping) = node, !mapping.isEmpty else { throw fail(node, "characteristics", "must name at least one characteristic") }
        var result: [ProtocolDescription.Characteristic] = []
        for (key, value) in mapping {
            let name = try text(key, "characteristics")
            let field = "characteristics.\(name)"
            let map = try self.mapping(value, field, keys: ["uuid", "write", "update", "read", "offered-in"])
            let write: GATTChannel.Write =
                switch try map["write"].map({ node throws(ProtocolDescriptionError) in try text(node, "\(field).write") }) ?? "none" {
                case "request": .request
                case "command": .command
                case "none": .none
                case let other: throw fail(map["write"], "\(field).write", "'\(other)' is not one of request, command, none")
                }
            let update: GATTChannel.Update =
                switch try map["update"].map({ node throws(ProtocolDescriptionError) in try text(node, "\(field).update") }) ?? "none" {
                case "notify": .notify
                case "indicate": .indicate
                case "none": .none
                case let other: throw fail(map["update"], "\(field).update", "'\(other)' is not one of notify, indicate, none")
                }
            var offered = Set(ProtocolDescription.DeviceRole.allCases)
            if let roles = map["offered-in"] {
                offered = []
                let items: [Node] = if case .sequence = roles { try list(roles, "\(field).offered-in") } else { [roles] }
                for item in items { offered.insert(try choice(item, "\(field).offered-in", ProtocolDescription.DeviceRole.self)) }
            }
            result.append(
                .init(
                    name: name, uuid: try uuid(try required(map, "uuid", in: value, field), "\(field).uuid"),
                    write: write, update: update, readable: try map["read"].map { node throws(ProtocolDescriptionError) in try flag(node, "\(field).read") } ?? false,
                    offeredIn: offered))
        }
        guard result.count <= 16 else { throw fail(node, "characteristics", "has \(result.count) characteristics: at most 16") }
        return result
    }

    func messages(_ node: Node, characteristics: [ProtocolDescription.Characteristic]) throws(ProtocolDescriptionError) -> [String: MessageTemplate] {
        guard case .mapping(let mapping) = node else { throw fail(node, "messages", "must be a mapping of message names to templates") }
        var result: [String: MessageTemplate] = [:]
        for (key, value) in mapping {
            let name = try text(key, "messages")
            let field = "messages.\(name)"
            let map = try self.mapping(value, field, keys: ["characteristic", "fields"])
            let characteristicName = try text(try required(map, "characteristic", in: value, field), "\(field).characteristic")
            guard let channel = characteristics.firstIndex(where: { $0.name == characteristicName }) else {
                throw fail(
                    map["characteristic"], "\(field).characteristic",
                    "'\(characteristicName)' is not a characteristic: use one of \(characteristics.map(\.name).joined(separator: ", "))")
            }
            var fields: [MessageTemplate.Field] = []
            for (index, item) in try list(try required(map, "fields", in: value, field), "\(field).fields").enumerated() {
                fields.append(try self.field(item, "\(field).fields[\(index)]"))
            }
            guard !fields.isEmpty else { throw fail(map["fields"], "\(field).fields", "is empty: a message has at least one field") }
            guard fields.filter({ $0 == .payload }).count <= 1 else { throw fail(map["fields"], "\(field).fields", "has two payloads: at most one") }
            if let at = fields.firstIndex(of: .payload), fields[(at + 1)...].contains(where: { if case .padTo = $0 { true } else { false } }) {
                throw fail(map["fields"], "\(field).fields", "pads after the payload, whose length then cannot be known: pad before it")
            }
            result[name] = MessageTemplate(name: name, channel: UInt8(channel), fields: fields)
        }
        return result
    }

    func field(_ node: Node, _ field: String) throws(ProtocolDescriptionError) -> MessageTemplate.Field {
        if case .scalar(let scalar) = node {
            guard scalar.string == "payload" else {
                throw fail(node, field, "'\(scalar.string)' is not a field: use payload, or a mapping such as {bytes: \"01 ff\"}, {u16: index}, {crc16: ccitt-false}")
            }
            return .payload
        }
        guard case .mapping(let mapping) = node, let first = mapping.first?.key.string else {
            throw fail(node, field, "must be payload or a mapping such as {u16: index}")
        }
        let widths = ["u8": 1, "u16": 2, "u24": 3, "u32": 4, "u64": 8]
        if let width = widths[first] {
            let map = try self.mapping(node, field, keys: [first, "endian", "invert"])
            let raw = try text(map[first], "\(field).\(first)")
            let value: MessageTemplate.Value
            if let literal = Self.parseNumber(raw) {
                let maximum: UInt64 = width >= 8 ? .max : (1 << (UInt64(width) * 8)) - 1
                guard literal <= maximum else { throw fail(map[first], "\(field).\(first)", "\(raw) does not fit in \(width) bytes") }
                value = .literal(literal)
            } else {
                guard raw.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) else {
                    throw fail(map[first], "\(field).\(first)", "'\(raw)' is neither a number nor a variable name")
                }
                value = .variable(raw)
            }
            return .integer(
                .init(
                    width: width, bigEndian: try endian(map["endian"], "\(field).endian"), value: value,
                    inverted: try map["invert"].map { node throws(ProtocolDescriptionError) in try flag(node, "\(field).invert") } ?? false))
        }
        switch first {
        case "bytes":
            let map = try self.mapping(node, field, keys: ["bytes"])
            let raw = try text(map["bytes"], "\(field).bytes")
            let digits = raw.filter { !$0.isWhitespace }
            guard digits.count % 2 == 0, !digits.isEmpty, let bytes = Self.hex(digits) else {
                throw fail(map["bytes"], "\(field).bytes", "'\(raw)' is not hex bytes: write them as \"01 ff\"")
            }
            return .bytes(bytes)
        case "crc16", "crc32", "sum8", "xor8":
            let map = try self.mapping(node, field, keys: [first, "skip", "endian"])
            let kind: MessageTemplate.Checksum.Kind
            switch first {
            case "crc16":
                let name = try text(map["crc16"], "\(field).crc16")
                guard let variant = Self.crc16Variants[name] else {
                    throw fail(map["crc16"], "\(field).crc16", "'\(name)' is not a CRC-16 bleota knows: use \(Self.crc16Variants.keys.sorted().joined(separator: ", "))")
                }
                kind = .crc16(variant)
            case "crc32":
                let name = try text(map["crc32"], "\(field).crc32")
                guard name == "iso-hdlc" else { throw fail(map["crc32"], "\(field).crc32", "'\(name)' is not a CRC-32 bleota knows: use iso-hdlc (zlib's)") }
                kind = .crc32
            case "sum8": kind = .sum8
            default: kind = .xor8
            }
            return .checksum(
                .init(
                    kind: kind, skip: Int(try map["skip"].map { node throws(ProtocolDescriptionError) in try number(node, "\(field).skip", in: 0...512) } ?? 0),
                    bigEndian: try endian(map["endian"], "\(field).endian")))
        case "pad-to":
            let map = try self.mapping(node, field, keys: ["pad-to", "fill"])
            return .padTo(
                length: Int(try number(map["pad-to"], "\(field).pad-to", in: 1...512)),
                fill: UInt8(try map["fill"].map { node throws(ProtocolDescriptionError) in try number(node, "\(field).fill", in: 0...255) } ?? 0))
        default:
            throw fail(node, field, "'\(first)' is not a field kind: use payload, bytes, u8, u16, u24, u32, u64, crc16, crc32, sum8, xor8 or pad-to")
        }
    }

    static let crc16Variants: [String: CRC16.Variant] = ["ccitt-false": .ccittFalse, "xmodem": .xmodem, "modbus": .modbus, "arc": .arc]

    /// Bytes from hex digits ("01ff"); nil for an odd count or anything but hex digits.
    static func hex(_ digits: String) -> [UInt8]? {
        let utf8 = Array(digits.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        for index in stride(from: 0, to: utf8.count, by: 2) {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    func endian(_ node: Node?, _ field: String) throws(ProtocolDescriptionError) -> Bool {
        guard let node else { return false }
        switch try text(node, field) {
        case "big": return true
        case "little": return false
        case let other: throw fail(node, field, "'\(other)' is neither big nor little")
        }
    }

    func image(_ node: Node?) throws(ProtocolDescriptionError) -> ProtocolDescription.ImageRules {
        var rules = ProtocolDescription.ImageRules(formats: ["bin", "hex"], align: 1, fill: 0xFF, maximumSize: nil, checks: [])
        guard let node else { return rules }
        let map = try mapping(node, "image", keys: ["formats", "align", "fill", "max-size", "checks"])
        if let formats = map["formats"] {
            rules.formats = try list(formats, "image.formats").map { node throws(ProtocolDescriptionError) in
                let format = try text(node, "image.formats")
                guard ["bin", "hex", "srec", "elf"].contains(format) else { throw fail(node, "image.formats", "'\(format)' is not one of bin, hex, srec, elf") }
                return format
            }
        }
        if let align = map["align"] { rules.align = Int(try number(align, "image.align", in: 1...65536)) }
        if let fill = map["fill"] { rules.fill = UInt8(try number(fill, "image.fill", in: 0...255)) }
        if let size = map["max-size"] { rules.maximumSize = Int(try number(size, "image.max-size", in: 1...(1 << 31))) }
        for (index, item) in try list(map["checks"], "image.checks").enumerated() {
            rules.checks.append(try imageCheck(item, "image.checks[\(index)]"))
        }
        return rules
    }

    func imageCheck(_ node: Node, _ field: String) throws(ProtocolDescriptionError) -> ProtocolDescription.ImageCheck {
        guard case .mapping(let mapping) = node, let kind = mapping.first?.key.string else {
            throw fail(node, field, "must be a mapping such as {marker: \"4b 4e 4c 54\", at: 8}")
        }
        switch kind {
        case "marker":
            let map = try self.mapping(node, field, keys: ["marker", "at"])
            let raw = try text(map["marker"], "\(field).marker")
            guard let bytes = Self.hex(raw.filter { !$0.isWhitespace }), !bytes.isEmpty else {
                throw fail(map["marker"], "\(field).marker", "'\(raw)' is not hex bytes: write them as \"4b 4e\"")
            }
            return .marker(at: Int(try number(try required(map, "at", in: node, field), "\(field).at", in: 0...(1 << 24))), bytes: bytes)
        case "size-at":
            let map = try self.mapping(node, field, keys: ["size-at"])
            return .sizeAt(Int(try number(map["size-at"], "\(field).size-at", in: 0...(1 << 24))))
        case "crc32-suffix":
            let map = try self.mapping(node, field, keys: ["crc32-suffix"])
            switch try text(map["crc32-suffix"], "\(field).crc32-suffix") {
            case "iso-hdlc": return .crc32Suffix(finalXor: true)
            case "no-final-xor": return .crc32Suffix(finalXor: false)
            case let other: throw fail(map["crc32-suffix"], "\(field).crc32-suffix", "'\(other)' is neither iso-hdlc nor no-final-xor")
            }
        case "magic-pointer":
            let map = try self.mapping(node, field, keys: ["magic-pointer", "base", "magic"])
            return .magicPointer(
                at: Int(try number(map["magic-pointer"], "\(field).magic-pointer", in: 0...(1 << 24))),
                base: try number(try required(map, "base", in: node, field), "\(field).base", in: 0...0xFFFF_FFFF),
                magic: try number(try required(map, "magic", in: node, field), "\(field).magic", in: 0...0xFFFF_FFFF))
        default:
            throw fail(node, field, "'\(kind)' is not an image check: use marker, size-at, crc32-suffix or magic-pointer")
        }
    }

    func step(_ node: Node?, _ field: String, messages: [String: MessageTemplate], extra: Set<String> = []) throws(ProtocolDescriptionError) -> ProtocolDescription.Step? {
        guard let node else { return nil }
        let map = try mapping(node, field, keys: Set(["send", "answer", "timeout"]).union(extra))
        let send = try text(try required(map, "send", in: node, field), "\(field).send")
        guard messages[send] != nil else { throw fail(map["send"], "\(field).send", "'\(send)' is not a message: use one of \(messages.keys.sorted().joined(separator: ", "))") }
        var answer: String?
        if let node = map["answer"] {
            let name = try text(node, "\(field).answer")
            guard messages[name] != nil else { throw fail(node, "\(field).answer", "'\(name)' is not a message: use one of \(messages.keys.sorted().joined(separator: ", "))") }
            answer = name
        }
        return .init(send: send, answer: answer, timeout: try map["timeout"].map { node throws(ProtocolDescriptionError) in try duration(node, "\(field).timeout") } ?? .seconds(5))
    }

    func update(_ node: Node, messages: [String: MessageTemplate]) throws(ProtocolDescriptionError) -> ProtocolDescription.UpdateSteps {
        let map = try mapping(node, "update", keys: ["enter-bootloader", "start", "end", "activate"])
        var address = ProtocolDescription.BootloaderAddress.same
        var erases = false
        if let jump = map["enter-bootloader"], case .mapping(let inner) = jump {
            if let value = inner["bootloader-address"] {
                let text = try text(value, "update.enter-bootloader.bootloader-address")
                guard let parsed = ProtocolDescription.BootloaderAddress(rawValue: text) else {
                    throw fail(value, "update.enter-bootloader.bootloader-address", "'\(text)' is neither same nor plus-one")
                }
                address = parsed
            }
            if let value = inner["erases-application"] { erases = try flag(value, "update.enter-bootloader.erases-application") }
        }
        guard let end = try step(try required(map, "end", in: node, "update"), "update.end", messages: messages) else {
            throw fail(node, "update.end", "is missing")
        }
        return .init(
            enterBootloader: try step(map["enter-bootloader"], "update.enter-bootloader", messages: messages, extra: ["bootloader-address", "erases-application"]),
            bootloaderAddress: address, bootloaderErasesApplication: erases,
            start: try step(map["start"], "update.start", messages: messages), end: end,
            activate: try step(map["activate"], "update.activate", messages: messages))
    }

    func messageName(_ node: Node?, _ field: String, _ messages: [String: MessageTemplate]) throws(ProtocolDescriptionError) -> String {
        let name = try text(node, field)
        guard messages[name] != nil else { throw fail(node, field, "'\(name)' is not a message: use one of \(messages.keys.sorted().joined(separator: ", "))") }
        return name
    }

    func transfer(
        _ node: Node, messages: [String: MessageTemplate], characteristics: [ProtocolDescription.Characteristic]
    ) throws(ProtocolDescriptionError) -> ProtocolDescription.TransferRules {
        let map = try mapping(node, "transfer", keys: ["packet", "payload", "pad-last", "flow", "gap", "bad-checksum", "on-failure", "resume", "when-full"])
        let packet = try messageName(try required(map, "packet", in: node, "transfer"), "transfer.packet", messages)
        guard messages[packet]!.hasPayload else { throw fail(map["packet"], "transfer.packet", "'\(packet)' has no payload field: a data packet carries one") }
        var payloadSize: Int?
        if let payload = map["payload"], payload.string != "max" {
            payloadSize = Int(try number(payload, "transfer.payload", in: 1...4096))
        }
        let flowNode = try required(map, "flow", in: node, "transfer")
        let flowMap = try mapping(flowNode, "transfer.flow", keys: ["mode", "read-every", "read", "ack", "every", "request"])
        let flow: ProtocolDescription.Flow
        switch try text(try required(flowMap, "mode", in: flowNode, "transfer.flow"), "transfer.flow.mode") {
        case "none":
            var read: Int?
            if let node = flowMap["read"] {
                let name = try text(node, "transfer.flow.read")
                guard let index = characteristics.firstIndex(where: { $0.name == name }), characteristics[index].readable else {
                    throw fail(node, "transfer.flow.read", "'\(name)' is not a readable characteristic (read: true)")
                }
                read = index
            }
            let every = try flowMap["read-every"].map { node throws(ProtocolDescriptionError) in Int(try number(node, "transfer.flow.read-every", in: 1...65535)) }
            if (every == nil) != (read == nil) { throw fail(flowNode, "transfer.flow", "read-every and read go together: give both or neither") }
            flow = .none(readEvery: every, read: read)
        case "ack":
            let ack = try messageName(try required(flowMap, "ack", in: flowNode, "transfer.flow"), "transfer.flow.ack", messages)
            guard messages[ack]!.variables.contains("next-index") else {
                throw fail(flowMap["ack"], "transfer.flow.ack", "'\(ack)' carries no next-index: an acknowledgement says which index the device expects next")
            }
            flow = .acknowledged(ack: ack, every: Int(try number(try required(flowMap, "every", in: flowNode, "transfer.flow"), "transfer.flow.every", in: 1...4096)))
        case "request":
            let request = try messageName(try required(flowMap, "request", in: flowNode, "transfer.flow"), "transfer.flow.request", messages)
            guard messages[request]!.variables.contains("index") else {
                throw fail(flowMap["request"], "transfer.flow.request", "'\(request)' carries no index: a request says which packet the device wants")
            }
            flow = .requested(request: request)
        case let other:
            throw fail(flowMap["mode"], "transfer.flow.mode", "'\(other)' is not one of none, ack, request")
        }
        func rule(_ key: String) throws(ProtocolDescriptionError) -> ProtocolDescription.GapRule {
            guard let node = map[key] else { return .fail }
            let value = try text(node, "transfer.\(key)")
            guard let parsed = ProtocolDescription.GapRule(rawValue: value) else { throw fail(node, "transfer.\(key)", "'\(value)' is neither fail nor drop") }
            return parsed
        }
        return .init(
            packet: packet, payloadSize: payloadSize,
            padLastPacket: try map["pad-last"].map { node throws(ProtocolDescriptionError) in UInt8(try number(node, "transfer.pad-last", in: 0...255)) },
            flow: flow, gap: try rule("gap"), badChecksum: try rule("bad-checksum"),
            failureReboots: try map["on-failure"].map { node throws(ProtocolDescriptionError) in
                switch try text(node, "transfer.on-failure") {
                case "wait-for-end": return false
                case "report-and-reboot": return true
                case let other: throw fail(node, "transfer.on-failure", "'\(other)' is neither wait-for-end nor report-and-reboot")
                }
            } ?? false,
            resume: try map["resume"].map { node throws(ProtocolDescriptionError) in try flag(node, "transfer.resume") } ?? false,
            whenQueueFull: try map["when-full"].map { node throws(ProtocolDescriptionError) in
                let value = try text(node, "transfer.when-full")
                guard let handling = FullQueueHandling(rawValue: value) else { throw fail(node, "transfer.when-full", "'\(value)' is neither drop nor hold") }
                return handling
            } ?? .drop)
    }

    func statuses(_ node: Node?) throws(ProtocolDescriptionError) -> ProtocolDescription.StatusTable {
        var table = ProtocolDescription.StatusTable(success: 0, codes: [:])
        guard let node else { return table }
        let map = try mapping(node, "statuses", keys: ["success", "codes"])
        if let success = map["success"] { table.success = try number(success, "statuses.success") }
        if let codes = map["codes"] {
            guard case .mapping(let entries) = codes else { throw fail(codes, "statuses.codes", "must map status values to {name, means}") }
            for (key, value) in entries {
                let code = try number(key, "statuses.codes")
                let field = "statuses.codes.\(key.string ?? "?")"
                let entry: ProtocolDescription.StatusCode
                if case .scalar(let scalar) = value {
                    entry = .init(name: scalar.string, meaning: nil)
                } else {
                    let inner = try mapping(value, field, keys: ["name", "means"])
                    entry = .init(
                        name: try text(try required(inner, "name", in: value, field), "\(field).name"),
                        meaning: try inner["means"].map { node throws(ProtocolDescriptionError) in try choice(node, "\(field).means", ProtocolDescription.StatusMeaning.self) })
                }
                table.codes[code] = entry
            }
        }
        return table
    }

    /// Checks across sections: variables each message may use, and that the flow fits the device rules.
    func check(_ description: ProtocolDescription, root: Node, top: [String: Node]) throws(ProtocolDescriptionError) {
        let sent: [(String, String)] = [description.update.enterBootloader, description.update.start, description.update.end, description.update.activate]
            .compactMap { $0 }.map { ($0.send, "update") }
        for (name, section) in sent {
            let template = description.message(name)
            for variable in template.variables where !ProtocolDescription.commandVariables.contains(variable) {
                throw fail(
                    top["messages"], "messages.\(name)",
                    "uses '\(variable)', which a host cannot fill in a command (\(section)): use one of \(ProtocolDescription.commandVariables.sorted().joined(separator: ", "))")
            }
            if template.hasPayload { throw fail(top["messages"], "messages.\(name)", "is a command with a payload: only the transfer's packet carries one") }
        }
        let packet = description.message(description.transfer.packet)
        let allowed = ProtocolDescription.commandVariables.union(ProtocolDescription.packetVariables)
        for variable in packet.variables where !allowed.contains(variable) {
            throw fail(top["messages"], "messages.\(packet.name)", "uses '\(variable)', which a data packet cannot carry: use one of \(allowed.sorted().joined(separator: ", "))")
        }
        let characteristic = description.characteristics[Int(packet.channel)]
        guard characteristic.write != .none else {
            throw fail(top["messages"], "messages.\(packet.name).characteristic", "'\(characteristic.name)' is not writable (write: none)")
        }
        if description.transfer.gap == .drop, case .none = description.transfer.flow {
            throw fail(top["transfer"], "transfer.gap", "is drop, but with flow mode none the host never learns what was dropped: use fail, or an ack or request flow")
        }
        if description.transfer.resume, case .none = description.transfer.flow {
            throw fail(top["transfer"], "transfer.resume", "needs an ack or request flow: the host learns where to go on from them")
        }
        if description.transfer.resume, description.update.start?.answer.map({ description.message($0).variables.contains("next-index") }) != true {
            throw fail(top["transfer"], "transfer.resume", "needs the start's answer to carry next-index: the device says there where it goes on from")
        }
        for step in [description.update.start, description.update.end].compactMap({ $0 }) {
            if let answer = step.answer, description.message(answer).variables.contains("status"), description.statuses.codes.isEmpty, top["statuses"] == nil {
                throw fail(root, "statuses", "is missing, but '\(answer)' carries a status: say which value is success")
            }
        }
    }
}
