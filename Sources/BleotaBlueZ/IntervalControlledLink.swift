import BleotaLink
import Synchronization

/// A link over BlueZ whose connection interval bleota may change while it is open
/// (``/BleotaLink/ConnectionIntervalControl``): the protocol's link (GATT writes and
/// notifications, or an L2CAP credit-based channel) with the HCI handle of the LE
/// connection under it.
///
/// A request is an HCI LE Connection Update (Core Vol 4, Part E, 7.8.18) written on a raw
/// HCI socket of the adapter and not waited for: the controller answers the kernel, which
/// keeps the connection's parameters, and the write returns at once, so a transfer's
/// reactor never waits on it. It needs `CAP_NET_RAW`, as `ble://…?interval=` does; without
/// it a request changes nothing and the link keeps its interval.
public final class IntervalControlledLink: ConnectionIntervalControl {
    /// The kernel's default minimum interval for LE connections it opens (`le_conn_min_interval`,
    /// 0x0018): the interval to go back to when the address did not ask for one.
    public static let kernelDefaultInterval = Duration.milliseconds(30)

    public let inner: any Link
    public let handle: UInt16
    public let adapter: String?
    public let openingConnectionInterval: Duration
    /// The interval last asked for (the opening one until then).
    private let asked: Mutex<Duration>
    /// Whether the connection under the link is still up, for ``close()``; nil: never end it.
    private let connectionIsUp: (@Sendable () async -> Bool)?
    /// Writes an HCI command for the adapter (a raw HCI socket's write, unless a test gives another).
    private let writeCommand: @Sendable (HCICommand) -> Void
    private let closed = Mutex(false)

    /// With `connectionIsUp`, closing the link also ends the LE connection under it (see ``close()``).
    public convenience init(
        _ inner: any Link, handle: UInt16, adapter: String?, openingInterval: Duration?,
        connectionIsUp: (@Sendable () async -> Bool)? = nil
    ) {
        self.init(
            inner, handle: handle, adapter: adapter, openingInterval: openingInterval, connectionIsUp: connectionIsUp,
            writeCommand: { command in try? RawHCISocket(adapter: adapter).write(command.encode()) })
    }

    init(
        _ inner: any Link, handle: UInt16, adapter: String?, openingInterval: Duration?,
        connectionIsUp: (@Sendable () async -> Bool)?, writeCommand: @escaping @Sendable (HCICommand) -> Void
    ) {
        self.inner = inner
        self.handle = handle
        self.adapter = adapter
        self.connectionIsUp = connectionIsUp
        self.writeCommand = writeCommand
        openingConnectionInterval = openingInterval ?? Self.kernelDefaultInterval
        asked = Mutex(openingConnectionInterval)
    }

    public var parameters: LinkParameters { inner.parameters }
    public func send(_ packet: [UInt8]) async throws(LinkError) { try await inner.send(packet) }
    public func receive() async throws(LinkError) -> [UInt8] { try await inner.receive() }
    /// Closes the link and, the first time, while its connection is still up, ends that
    /// connection with an HCI Disconnect. The kernel otherwise keeps an LE connection for 2 s
    /// after its last channel closes (`HCI_DISCONN_TIMEOUT`, in case it is wanted again), and a
    /// device that resets meanwhile (an update's jump to its bootloader, its activation) cannot
    /// advertise, so it is not found again until then. Written without waiting, as a connection
    /// update is; without `CAP_NET_RAW` the kernel ends the connection after its 2 s.
    public func close() async {
        let first = closed.withLock { closed in
            defer { closed = true }
            return !closed
        }
        // Asked before the close: a link whose connection already dropped must not end another one
        // that has taken its handle since.
        let up = first ? await connectionIsUp?() ?? false : false
        await inner.close()
        guard up else { return }
        writeCommand(.disconnect(handle: handle))
    }

    /// The interval last asked for: BlueZ does not tell a host the one in force.
    public var connectionInterval: Duration { asked.withLock { $0 } }

    public func requestConnectionInterval(_ interval: Duration) {
        guard LEConnectionInterval.allowed.contains(interval) else { return }
        let milliseconds = interval / .milliseconds(1)
        let command = ConnectionControl.updateCommand(milliseconds...milliseconds, latency: 0, handle: handle)
        do {
            try RawHCISocket(adapter: adapter).write(command.encode())
            asked.withLock { $0 = interval }
        } catch {
            // No permission or no adapter: the link keeps the interval it has.
        }
    }
}
