import BleotaEngine
import BleotaLink
import Synchronization

/// A clock the test moves by hand; a sleep moves it to the sleep's end at once.
public final class ManualClock: BleotaClock, Sendable {
    private let time = Mutex<Duration>(.zero)
    public init() {}
    public var now: Duration { time.withLock { $0 } }
    public func advance(_ by: Duration) { time.withLock { $0 += by } }
    public func sleep(until deadline: Duration) async throws { time.withLock { $0 = max($0, deadline) } }
}

/// The steps an update reported, in order, as their names.
public final class Events: Sendable {
    private let log = Mutex<[String]>([])
    public init() {}
    public func add(_ event: UpdateEvent) {
        if case .step(let step) = event { log.withLock { $0.append(step.rawValue) } }
    }
    public var steps: [String] { log.withLock { $0 } }
}
