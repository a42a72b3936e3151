import Synchronization

/// A host's Bluetooth controller in the simulator: one radio that all of its
/// connections share.
///
/// A controller runs one connection event at a time. When several connections
/// are due, it gives each event at most an equal share of the connection
/// interval, and an event that cannot start before its connection's next
/// anchor is skipped; so however many links an adapter holds, together they
/// never use more than its air time (protocols/link-model.md, "Several
/// connections on one adapter"). Devices in different ``SimulatedWorld``s —
/// each with its own preset, faults and seed — share an adapter by being
/// given the same one, on one ``/BleotaLink/SimulationRuntime``.
public final class SimulatedAdapter: Sendable {
    public let name: String

    struct State {
        /// When the radio is free again.
        var freeAt = Duration.zero
        var connections = 0
        var busy = Duration.zero
        var skippedEvents = 0
    }
    private let state = Mutex(State())

    public init(name: String) { self.name = name }

    /// Connections open on this adapter now.
    public var connectionCount: Int { state.withLock { $0.connections } }
    /// Radio time used by all its connections' events so far.
    public var airTime: Duration { state.withLock { $0.busy } }
    /// Connection events that found the radio busy until their next anchor.
    public var skippedEvents: Int { state.withLock { $0.skippedEvents } }

    func connectionOpened() { state.withLock { $0.connections += 1 } }
    func connectionClosed() { state.withLock { $0.connections = max(0, $0.connections - 1) } }

    /// A slot for an event anchored at `anchor` on a connection with `interval`: when it may start
    /// and how long it may last, or nil when the radio is busy past the connection's next anchor.
    func slot(at anchor: Duration, interval: Duration) -> (start: Duration, budget: Duration)? {
        state.withLock { state in
            let start = max(anchor, state.freeAt)
            let untilNext = anchor + interval - start
            guard untilNext > .zero else {
                state.skippedEvents += 1
                return nil
            }
            let share = interval / max(1, state.connections)
            return (start, min(untilNext, share))
        }
    }

    /// The event that took `slot` used the radio for `duration` from `start`.
    func used(from start: Duration, for duration: Duration) {
        state.withLock { state in
            // An empty event still polls: at least one exchange of empty packets.
            state.freeAt = max(state.freeAt, start + duration)
            state.busy += duration
        }
    }
}
