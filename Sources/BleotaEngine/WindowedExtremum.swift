/// The largest (or smallest) value seen over a sliding window of time, in
/// amortised constant time per sample.
///
/// Rate and round-trip estimators add a sample per acknowledgement; on a fast
/// link that is tens of thousands a second, so scanning every sample in the
/// window on each one would cost more than the transfer. A monotonic queue keeps
/// only the samples that can still become the extremum: a new sample evicts the
/// older ones it beats, and samples leave the front as they age out.
public struct WindowedExtremum<Value: Comparable & Sendable>: Sendable {
    public enum Kind: Sendable { case maximum, minimum }

    public let kind: Kind
    public let window: Duration
    private var entries: [(at: Duration, value: Value)] = []
    private var head = 0

    public init(_ kind: Kind, window: Duration) {
        self.kind = kind
        self.window = window
    }

    /// The extremum of the samples within the window of the latest one; nil before any.
    public var value: Value? { head < entries.count ? entries[head].value : nil }

    public mutating func add(_ value: Value, at now: Duration) {
        while entries.count > head, beats(value, entries[entries.count - 1].value) { entries.removeLast() }
        entries.append((now, value))
        while head < entries.count - 1, now - entries[head].at > window { head += 1 }
        // Reclaim the consumed front now and then, not on every sample.
        if head > 64 && head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
    }

    private func beats(_ new: Value, _ old: Value) -> Bool {
        kind == .maximum ? new >= old : new <= old
    }
}
