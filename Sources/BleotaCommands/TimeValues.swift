import ArgumentParser
import Foundation

/// Every time-like option goes through here: a number that is not finite,
/// negative where that makes no sense, or beyond what a `Duration` can hold
/// would otherwise trap when converted. The message names the option and
/// the range it takes.
enum TimeValue {
    /// `value` (in `unit`) as a duration, or a usage error naming `option` and `range`.
    static func duration(_ value: Double, option: String, unit: Unit, range: ClosedRange<Double>) throws -> Duration {
        guard value.isFinite, range.contains(value) else {
            throw ValidationError("\(option) \(describe(value)) is out of range: use \(describe(range.lowerBound))…\(describe(range.upperBound)) \(unit.rawValue)")
        }
        return .microseconds(Int64((value * unit.microseconds).rounded()))
    }

    enum Unit: String {
        case milliseconds = "ms"
        case seconds = "s"
        var microseconds: Double { self == .milliseconds ? 1_000 : 1_000_000 }
    }

    private static func describe(_ value: Double) -> String {
        if value.isNaN { return "nan" }
        if value.isInfinite { return value < 0 ? "-inf" : "inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

/// A time given on the command line: a number of seconds, or a number with its unit written
/// (`750ms`, `2.5s`, `1500us`, `30m`, `2h`). One rule for every time option, so `--connect-timeout 500ms`
/// and `--delay 0.002` mean what they say.
///
/// `--delay`, `--ack-timeout` and `--swap-time` took bare milliseconds in 0.1.0; for one release
/// a bare number there is still milliseconds, with a warning (``legacyMillisecondsWarning(option:)``).
struct TimeArgument: ExpressibleByArgument, Sendable, Equatable, CustomStringConvertible {
    /// The number as written.
    let value: Double
    /// The unit written after it; nil for a bare number.
    let unit: WrittenUnit?
    /// What the user wrote, for messages.
    let text: String

    enum WrittenUnit: String, CaseIterable, Sendable {
        case microseconds = "us"
        case milliseconds = "ms"
        case seconds = "s"
        /// For the times a rollout waits (`--stage-wait 30m`).
        case minutes = "m"
        case hours = "h"
        var seconds: Double {
            switch self {
            case .microseconds: 1e-6
            case .milliseconds: 1e-3
            case .seconds: 1
            case .minutes: 60
            case .hours: 3600
            }
        }
    }

    init?(argument: String) {
        let trimmed = argument.trimmingCharacters(in: .whitespaces)
        // The longest suffix first: "ms" and "us" end in "s".
        let written = [WrittenUnit.milliseconds, .microseconds, .seconds, .minutes, .hours].first { trimmed.lowercased().hasSuffix($0.rawValue) }
        let number = written.map { String(trimmed.dropLast($0.rawValue.count)).trimmingCharacters(in: .whitespaces) } ?? trimmed
        guard let value = Double(number) else { return nil }
        self.value = value
        unit = written
        text = argument
    }

    /// A value as the program's own default, in seconds.
    init(seconds: Double) {
        value = seconds
        unit = .seconds
        text = "\(seconds)s"
    }

    var description: String { text }
    static var defaultCompletionKind: CompletionKind { .default }

    /// Seconds, reading a bare number in `bare` (seconds, but for the options that took milliseconds).
    func seconds(bare: WrittenUnit = .seconds) -> Double { value * (unit ?? bare).seconds }

    /// The seconds, checked against `range` (in seconds), or a usage error naming `option` and the range.
    func checkedSeconds(option: String, range: ClosedRange<Double>, bare: WrittenUnit = .seconds) throws -> Double {
        let seconds = self.seconds(bare: bare)
        guard seconds.isFinite, range.contains(seconds) else {
            throw ValidationError("\(option) \(text) is out of range: use \(Self.describe(range.lowerBound))…\(Self.describe(range.upperBound)) s (or write a unit: ms, us)")
        }
        return seconds
    }

    /// The duration, after ``checkedSeconds(option:range:bare:)``.
    func duration(bare: WrittenUnit = .seconds) -> Duration { .microseconds(Int64((seconds(bare: bare) * 1_000_000).rounded())) }

    /// The warning a bare number gets where it still means milliseconds; nil when a unit is written.
    func legacyMillisecondsWarning(option: String) -> String? {
        // Zero is zero in any unit.
        guard unit == nil, value != 0 else { return nil }
        return
            "warning: \(option) \(text) is read as \(text) ms, as in 0.1.0; write \(option) \(text)ms (from the next release a bare number means seconds, as in every time option)"
    }

    private static func describe(_ value: Double) -> String {
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}

extension TimeArgument {
    /// argument-parser's transform for a time option: the value, or an error saying how to write one.
    @Sendable static func parse(_ argument: String) throws -> TimeArgument {
        guard let time = TimeArgument(argument: argument) else {
            throw ValidationError("write seconds, or a number with its unit (500ms, 2s, 1500us)")
        }
        return time
    }
}
