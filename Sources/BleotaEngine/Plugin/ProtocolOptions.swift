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
    private var texts: [String: String] = [:]

    /// No option given: every read is the option's default.
    public init() {}

    /// Parses `text` (each key and its value as written) against `specs`. A key no spec names,
    /// or a value its spec refuses, throws; keys are read in order, so the first such is the one
    /// reported.
    public init<Spec: OptionSpec>(parsing text: [String: String], _ specs: [Spec]) throws(ProtocolOptionError) {
        for key in text.keys.sorted() {
            let written = text[key]!
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
    public var given: [(key: String, text: String)] { texts.keys.sorted().map { ($0, texts[$0]!) } }
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
