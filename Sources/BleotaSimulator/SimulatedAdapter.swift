import Synchronization

/// A host's Bluetooth controller in the simulator: one radio that all of its
/// connections share.
///
/// As a central, the controller places each new connection's anchor in the
/// middle of the widest gap between the anchors it already serves, runs one
/// connection event at a time, and ends an event (at the latest) when another
/// connection with data is due, so its links take turns instead of colliding;
/// an event that finds the radio busy until its connection's next anchor is
/// skipped. However many links an adapter holds, together they never use more
/// than its air time (protocols/link-model.md, "Several connections on one
/// adapter"). Devices in different ``SimulatedWorld``s — each with its own
/// preset, faults and seed — share an adapter by being given the same one, on
/// one ``/BleotaLink/SimulationRuntime``.
public final class SimulatedAdapter: Sendable {
    public let name: String

    struct State {
        /// When the radio is free again.
        var freeAt = Duration.zero
        var busy = Duration.zero
        var skippedEvents = 0
        /// Each open connection's anchor phase: one of its anchors, and its interval.
        var anchors: [ObjectIdentifier: (anchor: Duration, interval: Duration)] = [:]
        /// Each connection's last event with data: those within one interval are due again.
        var lastActive: [ObjectIdentifier: Duration] = [:]
    }
    private let state = Mutex(State())

    public init(name: String) { self.name = name }

    /// Connections open on this adapter now.
    public var connectionCount: Int { state.withLock { $0.anchors.count } }
    /// Radio time used by all its connections' events so far.
    public var airTime: Duration { state.withLock { $0.busy } }
    /// Each open connection's anchor phase (for tests).
    var anchorPhases: [ObjectIdentifier: (anchor: Duration, interval: Duration)] { state.withLock { $0.anchors } }
    /// Connection events that found the radio busy until their next anchor.
    public var skippedEvents: Int { state.withLock { $0.skippedEvents } }

    /// The first anchor at or after `now` for a new connection with `interval`: in the middle of the
    /// widest gap between the anchors of the connections already open.
    ///
    /// Every anchor an open connection has within one new interval counts: a 7.5 ms connection
    /// has two in 15 ms. (Counting one put a 15 ms connection on the other 7.5 ms anchor, where
    /// each of its events was cut to nothing by the busy link's next one: a device in a mixed
    /// fleet went unanswered for 10 s.) Controllers do the same with their schedulers, whose
    /// whole job is that no link is starved until its supervision timeout.
    func placeAnchor(for connection: ObjectIdentifier, after now: Duration, interval: Duration) -> Duration {
        state.withLock { state in
            let phases = state.anchors.values.flatMap { other -> [Duration] in
                let within = other.interval < interval ? Int((interval / other.interval).rounded(.up)) : 1
                return (0..<within).map { Self.phase(of: other.anchor + other.interval * $0, in: interval) }
            }.sorted()
            var offset = Duration.zero
            if let first = phases.first {
                var widest = (start: phases.last!, length: first + interval - phases.last!)
                for (earlier, later) in zip(phases, phases.dropFirst()) where later - earlier > widest.length {
                    widest = (earlier, later - earlier)
                }
                offset = Self.phase(of: widest.start + widest.length / 2, in: interval)
            }
            // The first time ≥ now whose phase is `offset`.
            var anchor = now - Self.phase(of: now, in: interval) + offset
            if anchor < now { anchor += interval }
            state.anchors[connection] = (anchor, interval)
            return anchor
        }
    }

    /// A connection update took effect: from `anchor` on, `connection`'s anchors come every `interval`.
    func intervalChanged(_ connection: ObjectIdentifier, anchor: Duration, interval: Duration) {
        state.withLock { state in
            guard state.anchors[connection] != nil else { return }
            state.anchors[connection] = (anchor, interval)
        }
    }

    func connectionClosed(_ connection: ObjectIdentifier) {
        state.withLock { state in
            state.anchors[connection] = nil
            state.lastActive[connection] = nil
        }
    }

    /// A slot for an event of `connection` anchored at `anchor`: when it may start and how long it may
    /// last (until the next anchor of another connection with data, or its own next one), or nil when
    /// the radio is busy past its next anchor.
    func slot(for connection: ObjectIdentifier, at anchor: Duration, interval: Duration) -> (start: Duration, budget: Duration)? {
        state.withLock { state in
            state.lastActive[connection] = anchor
            let start = max(anchor, state.freeAt)
            var end = anchor + interval
            guard end > start else {
                state.skippedEvents += 1
                return nil
            }
            for (other, last) in state.lastActive where other != connection && last > anchor - interval {
                guard let (otherAnchor, otherInterval) = state.anchors[other] else { continue }
                end = min(end, Self.next(otherAnchor, every: otherInterval, after: start))
            }
            return (start, max(.zero, end - start))
        }
    }

    /// The event that took a slot used the radio for `duration` from `start`.
    func used(from start: Duration, for duration: Duration) {
        state.withLock { state in
            state.freeAt = max(state.freeAt, start + duration)
            state.busy += duration
        }
    }

    static func phase(of time: Duration, in interval: Duration) -> Duration {
        let cycles = (time / interval).rounded(.down)
        return time - interval * cycles
    }

    /// The first anchor of the series `anchor + k × interval` strictly after `time`.
    static func next(_ anchor: Duration, every interval: Duration, after time: Duration) -> Duration {
        guard anchor <= time else { return anchor }
        let cycles = ((time - anchor) / interval).rounded(.down) + 1
        return anchor + interval * cycles
    }
}
