/// A smoothed round-trip time, from samples of request to answer.
///
/// Every protocol needs one: to tell a lost packet from a slow answer without
/// waiting out a fixed worst-case timeout, and to pace probes. Samples follow
/// Karn's rule at the caller (only answers to requests sent once count); the
/// average is the classic exponentially weighted one with gain 1/8
/// (RFC 6298 §2), which follows a link that slows down within a few samples
/// without jumping at one late answer.
public struct RoundTripEstimator: Sendable, Hashable {
    public private(set) var smoothed: Duration?
    public private(set) var samples = 0

    public init() {}

    public mutating func add(_ sample: Duration) {
        guard sample >= .zero else { return }
        samples += 1
        smoothed = smoothed.map { $0 * 0.875 + sample * 0.125 } ?? sample
    }

    /// `multiple` × the smoothed round trip, kept within `minimum`…`maximum`;
    /// `fallback` until the first sample.
    public func scaled(by multiple: Double, minimum: Duration, maximum: Duration, fallback: Duration) -> Duration {
        guard let smoothed else { return fallback }
        return min(maximum, max(minimum, smoothed * multiple))
    }
}
