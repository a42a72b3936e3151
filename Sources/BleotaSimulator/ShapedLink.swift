import BleotaLink
import Synchronization

/// A BLE link model applied, in real time, to the messages of another
/// transport: what `bleota sim serve --link PRESET` puts between a UDP or
/// serial client and the simulated device, so a third-party SMP client meets
/// the same air time, packets per event, device buffer and loss as bleota.
///
/// Each message (a UDP datagram, a serial frame) crosses as a BLE client would
/// carry it: cut into ATT writes of at most MTU − 3 bytes (notifications, the
/// other way), each write into link-layer fragments, the fragments carried in
/// connection events — at most `packetsPerEvent` pairs, every
/// `connectionInterval`, under the same timing rules as ``SimulatedConnection``.
/// A message whose write (or notification) is lost is lost whole: a datagram
/// cannot arrive in part. Messages that find the device's queue full are
/// dropped, as on a simulated link to a device whose firmware drops them
/// (``/BleotaEngine/FullQueueHandling/drop``: SMP's and Nordic's, the protocols
/// `sim serve` carries over UDP and serial); `when-full=hold` is not applied here.
///
/// The clock is injected: `sim serve` runs it on the system clock, tests on
/// the simulator's virtual one.
public final class ShapedLink: Link, @unchecked Sendable {
    public let parameters: LinkParameters
    public let model: LinkModel
    public let faults: LinkFaults
    private let inner: any Link
    private let clock: any BleotaClock
    private let toDevice = Mailbox<[UInt8]>()
    private let kick = Mailbox<Void>()
    private let state: Mutex<State>

    /// One message on its way: its writes' link-layer fragments still to cross.
    struct InTransit {
        var message: [UInt8]
        /// Fragments of each write, in order; the last of a write ends it.
        var writes: [[Int]]
        var damaged = false
    }

    /// What crossed and what was lost, for `sim serve`'s closing line and tests.
    public struct Statistics: Sendable, Hashable {
        public var messagesToDevice = 0
        public var bytesToDevice = 0
        public var messagesToClient = 0
        public var lostToDevice = 0
        public var lostToClient = 0
        public var droppedByDeviceBuffer = 0
        public var connectionEvents = 0
    }

    struct State {
        var uplink: [InTransit] = []
        var downlink: [InTransit] = []
        var deviceQueued = 0
        var random: SeededRandom
        var statistics = Statistics()
        var closed = false
    }

    public init(inner: any Link, model: LinkModel, faults: LinkFaults = LinkFaults(), seed: UInt64 = 1, clock: any BleotaClock) {
        self.inner = inner
        self.model = model
        self.faults = faults
        self.clock = clock
        // Everything the inner link is (its sizes, its transport), shaped.
        var shaped = inner.parameters
        shaped.description += " shaped as a BLE link"
        parameters = shaped
        state = Mutex(State(random: SeededRandom(seed: seed, stream: "shaped-link")))
    }

    /// Carries messages both ways until the link closes: run it beside the device's
    /// `serve` (as a child task, so it runs on the caller's executor — the simulator's
    /// virtual clock in tests).
    public func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.readClient() }
            group.addTask { await self.runEvents() }
        }
    }

    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// The device's next message; taking it frees its place in the device's queue.
    public func receive() async throws(LinkError) -> [UInt8] {
        let message: [UInt8]?
        do { message = try await toDevice.take() } catch { throw .cancelled }
        guard let message else { throw .disconnected("the client's link closed") }
        state.withLock { $0.deviceQueued = max(0, $0.deviceQueued - 1) }
        return message
    }

    /// A message from the device: it leaves as notifications in the peripheral's slots.
    public func send(_ packet: [UInt8]) async throws(LinkError) {
        let closed = state.withLock { state -> Bool in
            guard !state.closed else { return true }
            state.downlink.append(InTransit(message: packet, writes: writes(of: packet.count)))
            return false
        }
        if closed { throw .disconnected("the client's link closed") }
        kick.put(())
    }

    public func close() async {
        shutDown()
        await inner.close()
    }

    public func deviceBooted() { inner.deviceBooted() }

    private func shutDown() {
        state.withLock { $0.closed = true }
        toDevice.close()
        kick.close()
    }

    /// The ATT writes (each as link-layer fragments) that carry a message of `bytes` bytes.
    func writes(of bytes: Int) -> [[Int]] {
        let largest = max(1, model.maximumPayload)
        var remaining = max(1, bytes)
        var writes: [[Int]] = []
        while remaining > 0 {
            let size = min(remaining, largest)
            writes.append(model.fragments(bytes: size))
            remaining -= size
        }
        return writes
    }

    private func readClient() async {
        while true {
            let message: [UInt8]
            do { message = try await inner.receive() } catch {
                shutDown()
                return
            }
            state.withLock { $0.uplink.append(InTransit(message: message, writes: writes(of: message.count))) }
            kick.put(())
        }
    }

    /// A message whose last fragment has crossed, and when in the event (as on the simulated link).
    /// A message whose last fragment has crossed, and when in the event.
    struct Completion {
        var at: Duration
        var toDevice: Bool
        var packet: [UInt8]
    }

    private func runEvents() async {
        var anchor = clock.now
        let interval = model.connectionInterval
        while true {
            let idle = state.withLock { $0.uplink.isEmpty && $0.downlink.isEmpty }
            if idle {
                guard (try? await kick.take()) != nil else { return }
                while kick.poll() != nil {}
                let now = clock.now
                if anchor < now { anchor += interval * Int(((now - anchor) / interval).rounded(.up)) }
            } else {
                while kick.poll() != nil {}
            }
            do { try await clock.sleep(until: anchor) } catch { return }
            let (duration, completions) = planEvent()
            for completion in completions {
                do { try await clock.sleep(until: anchor + completion.at) } catch { return }
                if completion.toDevice {
                    deliverToDevice(completion.packet)
                } else {
                    try? await inner.send(completion.packet)
                }
            }
            do { try await clock.sleep(until: anchor + duration) } catch { return }
            anchor += interval
        }
    }

    private func deliverToDevice(_ message: [UInt8]) {
        let accepted = state.withLock { state -> Bool in
            guard state.deviceQueued < model.deviceBuffer else {
                state.statistics.droppedByDeviceBuffer += 1
                return false
            }
            state.deviceQueued += 1
            state.statistics.messagesToDevice += 1
            state.statistics.bytesToDevice += message.count
            return true
        }
        if accepted { toDevice.put(message) }
    }

    /// One connection event: fragment pairs, each way, until the event's packet
    /// limit or the interval runs out; which messages complete, and when.
    private func planEvent() -> (Duration, [Completion]) {
        state.withLock { state in
            var time = Duration.zero
            var pairs = 0
            var completions: [Completion] = []
            state.statistics.connectionEvents += 1
            while pairs < model.packetsPerEvent {
                let central = state.uplink.first?.writes.first?.first ?? 0
                let peripheral = state.downlink.first?.writes.first?.first ?? 0
                if central == 0 && peripheral == 0 { break }
                let cost = model.pairTime(payload: central, response: peripheral)
                if time + cost > model.connectionInterval { break }
                time += cost
                pairs += 1
                if central > 0, let done = Self.advance(&state.uplink, lossRate: faults.writeLoss, random: &state.random) {
                    if done.damaged {
                        state.statistics.lostToDevice += 1
                    } else {
                        completions.append(Completion(at: time - cost + model.airTime(payload: central), toDevice: true, packet: done.message))
                    }
                }
                if peripheral > 0, let done = Self.advance(&state.downlink, lossRate: faults.notificationLoss, random: &state.random) {
                    if done.damaged {
                        state.statistics.lostToClient += 1
                    } else {
                        state.statistics.messagesToClient += 1
                        completions.append(Completion(at: time - LinkModel.interFrameSpace, toDevice: false, packet: done.message))
                    }
                }
            }
            return (max(time, model.pairTime(payload: 0)), completions)
        }
    }

    /// One fragment of the queue's first message crossed; returns the message when that was its last.
    /// A write is lost (with its message) by a draw when its last fragment crosses.
    private static func advance(_ queue: inout [InTransit], lossRate: Double, random: inout SeededRandom) -> InTransit? {
        queue[0].writes[0].removeFirst()
        if queue[0].writes[0].isEmpty {
            queue[0].writes.removeFirst()
            if lossRate > 0, random.chance(lossRate) { queue[0].damaged = true }
        }
        guard queue[0].writes.isEmpty else { return nil }
        return queue.removeFirst()
    }
}
