/// One key of a protocol's options, declared once: the key, what it means, its default
/// and how its text becomes a value. A protocol lists the option's spec (for help and
/// `bleota protocols`, and so that unknown keys are refused) and reads its value through
/// the same declaration, so no key is spelled twice and every value is checked in one
/// place, with one wording for what is wrong.
///
/// ```swift
/// static let window = ProtocolOption.integer("esp-window", meaning: "…", range: 0...64, default: 3)
/// public var deviceOptions: [DeviceOptionSpec] { [Self.window.deviceSpec] }
/// let window = try configuration.value(of: Self.window)
/// ```
public struct ProtocolOption<Value: Sendable>: Sendable {
    /// The key: in a `sim://` address for a device option, after `--protocol-option` for a host option.
    public let key: String
    /// One line for help texts.
    public let meaning: String
    /// The value when the key is not given.
    public let defaultValue: Value
    /// The generic `bleota sim serve` option that sets it too (`smp-buffer` for `--smp-buffer`), if any.
    public let serveOption: String?
    /// The value a text stands for; a refusal says what is wrong and what to write instead.
    let parse: @Sendable (String) throws(ProtocolOptionRefusal) -> Value

    public init(
        _ key: String, meaning: String, default defaultValue: Value, serveOption: String? = nil,
        parse: @escaping @Sendable (String) throws(ProtocolOptionRefusal) -> Value
    ) {
        self.key = key
        self.meaning = meaning
        self.defaultValue = defaultValue
        self.serveOption = serveOption
        self.parse = parse
    }

    /// The value `text` stands for, or nil's default.
    public func value(_ text: String?) throws(ProtocolOptionRefusal) -> Value {
        guard let text else { return defaultValue }
        return try parse(text)
    }

    /// What ``UpdateProtocol/deviceOptions`` lists for it, carrying its parse.
    public var deviceSpec: DeviceOptionSpec {
        DeviceOptionSpec(key: key, meaning: meaning, serveOption: serveOption) { [parse] text throws(ProtocolOptionRefusal) in try parse(text) }
    }
    /// What ``UpdateProtocol/hostOptions`` lists for it, carrying its parse.
    public var hostSpec: HostOptionSpec {
        HostOptionSpec(key: key, meaning: meaning) { [parse] text throws(ProtocolOptionRefusal) in try parse(text) }
    }
}

extension ProtocolOption where Value == Int {
    /// A decimal whole number in `range`.
    public static func integer(_ key: String, meaning: String, range: ClosedRange<Int>, default value: Int, serveOption: String? = nil) -> Self {
        Self(key, meaning: meaning, default: value, serveOption: serveOption) { text throws(ProtocolOptionRefusal) in
            guard let number = Int(text), range.contains(number) else { throw ProtocolOptionRefusal("\(text) is out of range: use \(range.lowerBound)…\(range.upperBound)") }
            return number
        }
    }
}

extension ProtocolOption where Value: FixedWidthInteger & UnsignedInteger {
    /// An unsigned number of `Value`'s width, decimal or `0x`-prefixed hex (a register or an ID).
    public static func number(_ key: String, meaning: String, default value: Value, range: ClosedRange<Value>? = nil) -> Self {
        Self(key, meaning: meaning, default: value) { text throws(ProtocolOptionRefusal) in try parseNumber(text, range: range) }
    }

    /// The parse of ``number(_:meaning:default:range:)``, for options that also take a word.
    public static func parseNumber(_ text: String, range: ClosedRange<Value>? = nil) throws(ProtocolOptionRefusal) -> Value {
        let parsed = text.lowercased().hasPrefix("0x") ? Value(text.dropFirst(2), radix: 16) : Value(text)
        guard let parsed else { throw ProtocolOptionRefusal("'\(text)' is not a number of \(Value.bitWidth) bits: use a decimal or 0x-prefixed value") }
        if let range, !range.contains(parsed) { throw ProtocolOptionRefusal("\(parsed) is out of range: use \(range.lowerBound)…\(range.upperBound)") }
        return parsed
    }
}

extension ProtocolOption where Value == Duration {
    /// A time in milliseconds (a decimal, fractions allowed) within `range`.
    public static func milliseconds(_ key: String, meaning: String, range: ClosedRange<Double>, default value: Duration, serveOption: String? = nil) -> Self {
        Self(key, meaning: meaning, default: value, serveOption: serveOption) { text throws(ProtocolOptionRefusal) in
            guard let milliseconds = Double(text), milliseconds.isFinite, range.contains(milliseconds) else {
                throw ProtocolOptionRefusal("'\(text)' is out of range: use \(Int(range.lowerBound))…\(Int(range.upperBound)) ms")
            }
            return .microseconds(Int64((milliseconds * 1000).rounded()))
        }
    }
}

extension ProtocolOption {
    /// One of a few words, each standing for a value; `noun` names what they are
    /// ("a buttonless kind"), or with two words the refusal says "neither … nor …".
    public static func choice(_ key: String, meaning: String, _ choices: KeyValuePairs<String, Value>, default value: Value, noun: String? = nil) -> Self {
        let pairs = choices.map { ($0.key, $0.value) }
        return Self(key, meaning: meaning, default: value) { text throws(ProtocolOptionRefusal) in
            if let match = pairs.first(where: { $0.0 == text }) { return match.1 }
            let words = pairs.map(\.0)
            if let noun {
                throw ProtocolOptionRefusal("'\(text)' is not \(noun): use \(words.dropLast().joined(separator: ", ")) or \(words.last ?? "")")
            }
            if words.count == 2 { throw ProtocolOptionRefusal("'\(text)' is neither \(words[0]) nor \(words[1])") }
            throw ProtocolOptionRefusal("'\(text)' is not one of \(words.joined(separator: ", "))")
        }
    }
}

extension ProtocolOption where Value == String? {
    /// Any text, nil when not given; `check` refuses what the protocol cannot use.
    public static func text(_ key: String, meaning: String, check: @escaping @Sendable (String) -> String? = { _ in nil }) -> Self {
        Self(key, meaning: meaning, default: nil) { text throws(ProtocolOptionRefusal) in
            if let problem = check(text) { throw ProtocolOptionRefusal(problem) }
            return text
        }
    }
}

/// Why a text is no value of an option: "'x' is out of range: use 1…64".
public struct ProtocolOptionRefusal: Error, Sendable, Equatable {
    public var problem: String
    public init(_ problem: String) { self.problem = problem }
}
