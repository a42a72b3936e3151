/// A protocol's own options once parsed: each given key's value, typed as its
/// ``ProtocolOption`` says.
///
/// Made once, where the text comes in (the command line's `--protocol-option`, a `sim://`
/// address, a fleet's device list or a campaign's row, both read through the same planner),
/// against the specs the protocol lists (``UpdateProtocol/hostOptions``,
/// ``UpdateProtocol/deviceOptions``). Below that edge a host or device half asks for an option
/// and gets its value or its default: a value no option takes cannot get this far, so reading
/// one never fails in the middle of an update.
public struct ProtocolOptions: Sendable {
    private var values: [String: any Sendable] = [:]
    private var texts = ProtocolOptionText()

    /// No option given: every read is the option's default.
    public init() {}

    /// Parses `text` (each key and its value as written) against `specs`. A key no spec names,
    /// or a value its spec refuses, throws; keys are read in order, so the first such is the one
    /// reported.
    public init<Spec: OptionSpec>(parsing text: ProtocolOptionText, _ specs: [Spec]) throws(ProtocolOptionError) {
        for (key, written) in text.given {
            guard let spec = specs.first(where: { $0.key == key }) else {
                throw ProtocolOptionError(
                    key: key, value: written,
                    problem: specs.isEmpty ? "is not a key: this protocol takes none" : "is not a key: use one of \(specs.map(\.key).joined(separator: ", "))")
            }
            do { values[key] = try spec.value(parsing: written) } catch {
                throw ProtocolOptionError(key: key, value: written, problem: error.problem)
            }
            texts[key] = written
        }
    }

    /// The value of `option`: as given, or its default.
    public subscript<Value>(option: ProtocolOption<Value>) -> Value {
        values[option.key].flatMap { $0 as? Value } ?? option.defaultValue
    }

    /// Gives `option` a value (a command that fills one from a flag of its own, a test).
    public mutating func set<Value>(_ option: ProtocolOption<Value>, to value: Value, text: String) {
        values[option.key] = value
        texts[option.key] = text
    }

    /// Whether `key` was given.
    public func contains(_ key: String) -> Bool { values[key] != nil }
    /// True when none was given.
    public var isEmpty: Bool { values.isEmpty }
    /// The keys given and the text each was given as, in key order: for what passes options on
    /// as text (a simulated device's address, a report).
    public var given: [(key: String, text: String)] { texts.given }
    /// What was given, as text again: for what stores options or passes them on (a campaign's
    /// row, a simulated device's address).
    public var text: ProtocolOptionText { texts }
}

/// A protocol's options as written, before they are parsed: each key and its text, as a device
/// list, a campaign's row or a `sim://` address holds them until the protocol they are for is known.
///
/// A type of its own, not a dictionary of strings, so that the one thing done with it is clear:
/// it is parsed (``ProtocolOptions/init(parsing:_:)``) against the protocol's specs where the
/// protocol becomes known, and no host or device half ever reads a value from it. Encoded as a
/// JSON object of strings, as a device list and a campaign's row write it.
public struct ProtocolOptionText: Sendable, Hashable, Codable, ExpressibleByDictionaryLiteral, CustomStringConvertible {
    /// Key and text, in key order, one a key.
    private var entries: [Entry] = []

    struct Entry: Sendable, Hashable {
        var key: String
        var text: String
    }

    public init() {}

    public init(dictionaryLiteral elements: (String, String)...) {
        for (key, text) in elements { self[key] = text }
    }

    /// The text given for `key`; setting one replaces what was there.
    public subscript(key: String) -> String? {
        get { entries.first { $0.key == key }?.text }
        set {
            entries.removeAll { $0.key == key }
            guard let newValue else { return }
            entries.append(Entry(key: key, text: newValue))
            entries.sort { $0.key < $1.key }
        }
    }

    /// Each key and its text, in key order.
    public var given: [(key: String, text: String)] { entries.map { ($0.key, $0.text) } }
    public var keys: [String] { entries.map(\.key) }
    public var isEmpty: Bool { entries.isEmpty }

    /// These with `other`'s on top: a device's own keys over the ones the whole command gave.
    public func overridden(by other: ProtocolOptionText) -> ProtocolOptionText {
        var merged = self
        for entry in other.entries { merged[entry.key] = entry.text }
        return merged
    }

    /// Only the keys `keep` accepts.
    public func filter(_ keep: (String) -> Bool) -> ProtocolOptionText {
        var kept = ProtocolOptionText()
        kept.entries = entries.filter { keep($0.key) }
        return kept
    }

    /// `key=text` pairs, in key order: how the command line writes them.
    public var pairs: [String] { entries.map { "\($0.key)=\($0.text)" } }
    public var description: String { pairs.joined(separator: " ") }

    struct OptionKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: OptionKey.self)
        for key in container.allKeys { self[key.stringValue] = try container.decode(String.self, forKey: key) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: OptionKey.self)
        for entry in entries { try container.encode(entry.text, forKey: OptionKey(stringValue: entry.key)) }
    }
}

/// What ``ProtocolOptions`` parses against: a key and the parse its option owns.
public protocol OptionSpec: Sendable {
    var key: String { get }
    /// The typed value `text` stands for, or the refusal that says what to write instead.
    func value(parsing text: String) throws(ProtocolOptionRefusal) -> any Sendable
}

/// A protocol option given a value it does not take, or a key the protocol lacks, in one line:
/// "window=0: 0 is out of range: use 1…64".
public struct ProtocolOptionError: Error, Sendable, Equatable, CustomStringConvertible {
    public var key: String
    public var value: String
    public var problem: String

    public init(key: String, value: String, problem: String) {
        self.key = key
        self.value = value
        self.problem = problem
    }

    public var description: String { "\(key)=\(value): \(problem)" }
}
