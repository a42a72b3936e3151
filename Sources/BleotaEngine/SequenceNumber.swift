/// 16-bit packet sequence numbers and how to turn them back into packet indexes.
///
/// Two bytes per packet instead of four matter on a 20-byte BLE payload. An image
/// of more than 65 536 packets wraps around, so both sides keep the absolute
/// index and send it modulo 2¹⁶; the receiver unwraps a number to the absolute
/// index nearest its reference point. That is unambiguous while the window stays
/// far below 32 768 (``TransferTuning/maximumWindow`` is 250).
public enum SequenceNumber {
    public static func wrap(_ index: Int) -> UInt16 { UInt16(truncatingIfNeeded: index) }

    /// The absolute index whose low 16 bits are `sequence`, nearest to `reference`.
    public static func unwrap(_ sequence: UInt16, near reference: Int) -> Int {
        let delta = Int(Int16(bitPattern: sequence &- UInt16(truncatingIfNeeded: reference)))
        return reference + delta
    }

    /// The absolute index congruent to `residue` modulo `modulus` nearest to
    /// `reference` (for headers that carry less than 16 bits): unambiguous while
    /// every index in play lies within `modulus / 2` of the reference.
    public static func unwrap(_ residue: Int, modulus: Int, near reference: Int) -> Int {
        let half = modulus / 2
        let offset = ((residue - reference) % modulus + modulus + half) % modulus - half
        return reference + offset
    }
}

/// A set of byte ranges, kept sorted and merged: what a receiver holds of a stream.
public struct RangeSet: Sendable, Hashable, Codable {
    public private(set) var ranges: [Range<Int>] = []

    public init() {}
    public init(_ ranges: [Range<Int>]) { for range in ranges { insert(range) } }

    public var isEmpty: Bool { ranges.isEmpty }
    public var count: Int { ranges.reduce(0) { $0 + $1.count } }

    public mutating func insert(_ range: Range<Int>) {
        guard !range.isEmpty else { return }
        var lower = range.lowerBound
        var upper = range.upperBound
        var result: [Range<Int>] = []
        var inserted = false
        for existing in ranges {
            if existing.upperBound < lower {
                result.append(existing)
            } else if existing.lowerBound > upper {
                if !inserted {
                    result.append(lower..<upper)
                    inserted = true
                }
                result.append(existing)
            } else {
                lower = min(lower, existing.lowerBound)
                upper = max(upper, existing.upperBound)
            }
        }
        if !inserted { result.append(lower..<upper) }
        ranges = result
    }

    public func contains(_ range: Range<Int>) -> Bool {
        guard !range.isEmpty else { return true }
        // Binary search for the range that could hold `range.lowerBound`.
        var low = 0, high = ranges.count
        while low < high {
            let mid = (low + high) / 2
            if ranges[mid].upperBound <= range.lowerBound { low = mid + 1 } else { high = mid }
        }
        return low < ranges.count && ranges[low].lowerBound <= range.lowerBound && ranges[low].upperBound >= range.upperBound
    }
}
