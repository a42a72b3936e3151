import ArgumentParser

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
