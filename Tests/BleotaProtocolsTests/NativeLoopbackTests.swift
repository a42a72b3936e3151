import BleotaCodec
import BleotaEngine
import BleotaLink
import Synchronization
import Testing

@testable import BleotaProtocols

/// A device reachable over in-memory loopback links: each connect makes a new
/// pair and serves it; a reboot closes the link and boots the device again.
final class LoopbackConnector: DeviceConnector {
    let device: NativeDevice
    let clock = SystemClock()
    let dropEvery: Int
    let disconnectAfterPackets: Int?
    private let counters = Mutex((packets: 0, connects: 0, disconnected: false))
    private let current = Mutex<LoopbackLink?>(nil)
    /// The device's serving of the previous connection: a new connection waits for it to end,
    /// as a real device that resets is gone before anyone can connect again.
    private let previous = Mutex<Task<Void, Never>?>(nil)

    init(device: NativeDevice, dropEvery: Int = 0, disconnectAfterPackets: Int? = nil) {
        self.device = device
        self.dropEvery = dropEvery
        self.disconnectAfterPackets = disconnectAfterPackets
    }

    var description: String { "loopback://test" }
    var connects: Int { counters.withLock { $0.connects } }

    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        if let last = previous.withLock({ $0 }) {
            await current.withLock({ $0 })?.close()
            await last.value
        }
        let dropEvery = self.dropEvery
        let limit = disconnectAfterPackets
        let (host, deviceEnd) = LoopbackLink.pair(maximumPayload: 244) { [self] packet in
            let (count, cut): (Int, Bool) = self.counters.withLock { state in
                guard packet.first == NativeMessage.Opcode.data.rawValue else { return (0, false) }
                state.packets += 1
                if let limit, state.packets == limit, !state.disconnected {
                    state.disconnected = true
                    return (state.packets, true)
                }
                return (state.packets, false)
            }
            if cut {
                let link = self.current.withLock { $0 }
                Task { await link?.close() }
                return nil
            }
            if dropEvery > 0, count > 0, count % dropEvery == 0 { return nil }
            return packet
        }
        counters.withLock { $0.connects += 1 }
        current.withLock { $0 = host }
        let device = self.device
        let clock = self.clock
        let environment = NativeDeviceEnvironment(clock: clock) { _ in
            // Boot before the link drops: a host that reconnects at once must find the rebooted device,
            // never the old one (on a loaded machine the reconnect can beat an unordered boot).
            await device.boot()
            await deviceEnd.close()
        }
        previous.withLock { $0 = Task { await device.serve(deviceEnd, environment: environment) } }
        return host
    }
}

@Suite struct NativeLoopbackTests {
    static func image(_ size: Int, seed: UInt8 = 7) -> [UInt8] {
        var state = UInt32(seed) &* 2_654_435_761
        return (0..<size).map { _ in
            state = state &* 1_664_525 &+ 1_013_904_223
            return UInt8(truncatingIfNeeded: state >> 24)
        }
    }

    static let fastTuning = TransferTuning(window: 16, ackInterval: 4, ackTimeout: .milliseconds(80))

    @Test func flashFromApplicationModeActivatesTheExactImage() async throws {
        let storage = DeviceStorage(activeImage: [1, 2, 3], activeVersion: "1.0.0", slotSize: 64 * 1024)
        let device = NativeDevice(name: "test", storage: storage, bufferCount: 16, maximumPacket: 244)
        let connector = LoopbackConnector(device: device)
        let image = Self.image(20_000)
        let steps = Mutex<[UpdateStep]>([])
        let updater = NativeUpdater(connector: connector, clock: connector.clock, tuning: Self.fastTuning) { event in
            if case .step(let step) = event { steps.withLock { $0.append(step) } }
        }
        let report = try await updater.flash(image: image, version: "2.0.0")
        let state = storage.snapshot
        #expect(state.activeImage == image)
        #expect(state.activeVersion == "2.0.0")
        #expect(state.activations == 1)
        #expect(report.versionBefore == "1.0.0")
        #expect(report.versionAfter == "2.0.0")
        #expect(steps.withLock { $0 } == [.connect, .enterBootloader, .reconnect, .transfer, .verify, .activate, .confirm])
        #expect(connector.connects == 3)
    }

    @Test func lossIsDetectedAndOnlyLostPacketsAreResent() async throws {
        let storage = DeviceStorage(slotSize: 64 * 1024)
        storage.withState { $0.bootToBootloader = true }
        let device = NativeDevice(name: "test", storage: storage, bufferCount: 16, maximumPacket: 244)
        let connector = LoopbackConnector(device: device, dropEvery: 10)
        let image = Self.image(30_000)
        let updater = NativeUpdater(connector: connector, clock: connector.clock, tuning: Self.fastTuning)
        let report = try await updater.flash(image: image, version: "3")
        #expect(storage.snapshot.activeImage == image)
        let packets = (image.count + 238) / 239
        #expect(report.statistics.packetsResent > 0)
        // Every tenth data packet is dropped, so about a tenth of packets are resent — not whole windows.
        #expect(report.statistics.packetsResent <= packets / 5)
        #expect(report.statistics.packetsSent == packets + report.statistics.packetsResent)
    }

    @Test func disconnectMidTransferResumesWithoutResendingHeldData() async throws {
        let storage = DeviceStorage(slotSize: 64 * 1024)
        storage.withState { $0.bootToBootloader = true }
        let device = NativeDevice(name: "test", storage: storage, bufferCount: 16, maximumPacket: 244)
        let connector = LoopbackConnector(device: device, disconnectAfterPackets: 60)
        let image = Self.image(40_000)
        let notes = Mutex<[String]>([])
        let largestWindow = Mutex(0)
        let updater = NativeUpdater(connector: connector, clock: connector.clock, tuning: Self.fastTuning) { event in
            if case .note(let note) = event { notes.withLock { $0.append(note) } }
            if case .progress(let progress) = event { largestWindow.withLock { $0 = max($0, progress.window) } }
        }
        let report = try await updater.flash(image: image, version: "4")
        #expect(storage.snapshot.activeImage == image)
        #expect(report.statistics.reconnects == 1)
        #expect(notes.withLock { $0 }.contains { $0.contains("resuming") })
        // At most one window (as closed-loop pacing grew it) of data the device already had is sent again.
        #expect(report.statistics.packetsResent <= largestWindow.withLock { $0 })
        #expect(report.statistics.packetsResent < report.statistics.packetsSent / 4)
    }

    @Test func imageLargerThanTheSlotIsRefusedBeforeAnythingIsSent() async throws {
        let storage = DeviceStorage(activeImage: [9], activeVersion: "1", slotSize: 1000)
        let device = NativeDevice(name: "test", storage: storage, bufferCount: 16, maximumPacket: 244)
        let connector = LoopbackConnector(device: device)
        let updater = NativeUpdater(connector: connector, clock: connector.clock, tuning: Self.fastTuning)
        let error = await #expect(throws: TransferError.self) { try await updater.flash(image: Self.image(5000), version: "2") }
        #expect(error?.step == .connect)
        #expect(error?.message == "the image is 5000 bytes but the device's slot holds 1000: nothing was sent; build a smaller image")
        #expect(storage.snapshot.activeImage == [9])
        #expect(storage.snapshot.staging.isEmpty)
    }

    @Test func pushThenPullRoundTripsAFile() async throws {
        let storage = DeviceStorage(slotSize: 64 * 1024)
        let device = NativeDevice(name: "test", storage: storage, bufferCount: 16, maximumPacket: 244)
        let connector = LoopbackConnector(device: device)
        let file = Self.image(5_000, seed: 3)
        let updater = NativeUpdater(connector: connector, clock: connector.clock, tuning: Self.fastTuning)
        _ = try await updater.push(file: file, name: "log.bin")
        #expect(storage.snapshot.files["log.bin"] == file)
        let (pulled, report) = try await updater.pull(name: "log.bin")
        #expect(pulled == file)
        #expect(report.bytes == file.count)
        let missing = await #expect(throws: TransferError.self) { try await updater.pull(name: "nope") }
        #expect(missing?.message == "the device has no file named 'nope': check the name")
    }

    @Test func compressedTransferInflatesOnTheDevice() async throws {
        let storage = DeviceStorage(slotSize: 64 * 1024)
        storage.withState { $0.bootToBootloader = true }
        let device = NativeDevice(name: "test", storage: storage, bufferCount: 16, maximumPacket: 244)
        let connector = LoopbackConnector(device: device)
        let image = Self.image(4_000) + [UInt8](repeating: 0xFF, count: 16_000)
        var tuning = Self.fastTuning
        tuning.compression = .auto
        let updater = NativeUpdater(connector: connector, clock: connector.clock, tuning: tuning)
        let report = try await updater.flash(image: image, version: "z")
        #expect(report.compressed)
        #expect(report.streamBytes < image.count / 2)
        #expect(storage.snapshot.activeImage == image)
    }
}
