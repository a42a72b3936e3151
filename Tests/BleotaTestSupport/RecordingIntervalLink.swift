import BleotaLink
import Synchronization

/// A link that records the connection intervals asked of it and applies each at once: for tests of
/// who asks a link for which interval (a fleet's last transfer asks for 7.5 ms, then its opening 15 ms).
public final class RecordingIntervalLink: ConnectionIntervalControl {
    public let parameters = LinkParameters(maximumPayload: 244, description: "interval-recorder")
    public let openingConnectionInterval = Duration.milliseconds(15)
    private let state = Mutex<(inForce: Duration, asked: [Double])>((.milliseconds(15), []))

    /// Told after each interval asked, so a test can wait for one instead of polling.
    private let onRequest: @Sendable () -> Void

    public init(onRequest: @escaping @Sendable () -> Void = {}) { self.onRequest = onRequest }

    public var connectionInterval: Duration { state.withLock { $0.inForce } }
    /// The intervals asked, in milliseconds, in order.
    public var asked: [Double] { state.withLock { $0.asked } }

    public func requestConnectionInterval(_ interval: Duration) {
        state.withLock { state in
            state.asked.append(interval / .milliseconds(1))
            state.inForce = interval
        }
        onRequest()
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {}
    public func receive() async throws(LinkError) -> [UInt8] { throw .disconnected("a recorder receives nothing") }
    public func close() async {}
}
