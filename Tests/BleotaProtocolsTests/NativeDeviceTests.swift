import BleotaCodec
import BleotaEngine
import BleotaLink
import Testing

@testable import BleotaProtocols

/// Talks to a `NativeDevice` directly over a loopback link, packet by packet.
struct DeviceHarness {
    let host: LoopbackLink
    let storage: DeviceStorage

    /// A device on `runtime`'s virtual clock when one is given, else on the system's.
    init(
        bootloader: Bool = true, slot: Int = 64 * 1024,
        capabilities: NativeMessage.Capabilities = [.deflate, .testTransfer, .files, .resume, .compactData, .ackIntervalChange],
        runtime: SimulationRuntime? = nil
    ) {
        storage = DeviceStorage(activeImage: [1, 2, 3], activeVersion: "1.0.0", slotSize: slot)
        storage.withState { $0.bootToBootloader = bootloader }
        let device = NativeDevice(name: "test", storage: storage, bufferCount: 8, maximumPacket: 244, capabilities: capabilities)
        let (host, deviceEnd) = LoopbackLink.pair(maximumPayload: 244)
        self.host = host
        let environment = NativeDeviceEnvironment(clock: runtime?.clock ?? SystemClock()) { _ in await deviceEnd.close() }
        Task(executorPreference: runtime) { await device.serve(deviceEnd, environment: environment) }
    }

    func send(_ bytes: [UInt8]) async throws { try await host.send(bytes) }
    func send(_ message: NativeMessage) async throws { try await host.send(message.encode()) }

    func reply() async throws -> NativeMessage {
        var reassembler = NativeReassembler()
        while true {
            if let bytes = reassembler.feed(try await host.receive()) { return try NativeMessage(decoding: bytes) }
        }
    }
}

@Suite struct NativeDeviceTests {
    @Test func unknownOpcodeGetsAnErrorReplyNotACrash() async throws {
        let device = DeviceHarness()
        try await device.send(withCRC([0x42, 1, 2, 3]))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.request == 0x42)
        #expect(error.status == .unknownOpcode)
        #expect(error.message == "opcode at offset 0: unknown opcode 0x42")
    }

    @Test func malformedRequestGetsAnErrorReply() async throws {
        let device = DeviceHarness()
        try await device.send(withCRC([0x03, 0x09]))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.status == .malformed)
        #expect(error.message == "start.target at offset 1: unknown target 9")
        // And it still answers afterwards.
        try await device.send(.hello(.init()))
        guard case .helloResponse = try await device.reply() else {
            Issue.record("device stopped answering")
            return
        }
    }

    @Test func damagedPacketsAreDroppedSilentlyAndErrorsAreNeverAnswered() async throws {
        let device = DeviceHarness()
        try await device.send([0x01, 0x01, 0x01, 0x00, 0x00])  // bad CRC
        try await device.send(NativeMessage.error(.init(request: 1, status: .busy, message: "x")).encode())
        try await device.send(.verify)
        // The first answer is to VERIFY: nothing came back for the other two.
        guard case .verifyResponse(let result) = try await device.reply() else {
            Issue.record("expected verify")
            return
        }
        #expect(result.status == .invalidState)
    }

    @Test func versionMismatchIsRefusedNamingBothRanges() async throws {
        let device = DeviceHarness()
        try await device.send(.hello(.init(minimumVersion: 2, maximumVersion: 3)))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.status == .unsupportedVersion)
        #expect(error.message == "this device speaks protocol version 1…1, the host offered 2…3")
    }

    @Test func firmwareStartOutsideTheBootloaderIsRefused() async throws {
        let device = DeviceHarness(bootloader: false)
        let start = NativeMessage.Start(
            target: .firmware, compressed: false, imageSize: 10, streamSize: 10, crc32: 0,
            sha256: [], packetSize: 100, ackInterval: 4, label: "x")
        try await device.send(.start(start))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.status == .invalidState)
        #expect(error.message == "firmware transfers need the bootloader: send ENTER_BOOTLOADER first")
    }

    @Test func activateWithoutAVerifiedImageIsRefusedAndNothingChanges() async throws {
        let device = DeviceHarness()
        try await device.send(.activate)
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.status == .invalidState)
        #expect(device.storage.snapshot.activeImage == [1, 2, 3])
    }

    @Test func imageThatFailsVerificationIsNeverActivated() async throws {
        let device = DeviceHarness()
        let image: [UInt8] = Array(repeating: 7, count: 300)
        // The host claims a different hash than the bytes it sends.
        let start = NativeMessage.Start(
            target: .firmware, compressed: false, imageSize: 300, streamSize: 300,
            crc32: CRC32.checksum(image), sha256: Array(repeating: 0, count: 32),
            packetSize: 150, ackInterval: 1, label: "evil")
        try await device.send(.start(start))
        guard case .startResponse(let response) = try await device.reply() else {
            Issue.record("expected start response")
            return
        }
        #expect(response.status == .ok)
        for sequence in 0..<2 {
            try await device.send(.data(.init(sequence: UInt16(sequence), payload: Array(image[sequence * 150..<(sequence + 1) * 150]))))
            _ = try await device.reply()  // ACK
        }
        try await device.send(.verify)
        guard case .verifyResponse(let result) = try await device.reply() else {
            Issue.record("expected verify")
            return
        }
        #expect(result.status == .verifyFailed)
        #expect(result.sha256 == SHA256Digest.hash(image))
        try await device.send(.activate)
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected refusal")
            return
        }
        #expect(error.status == .invalidState)
        #expect(device.storage.snapshot.activeImage == [1, 2, 3])
        #expect(device.storage.snapshot.staging.isEmpty)
    }

    /// A delta patch is rebuilt against the running image and checked like any image: a damaged patch
    /// (here one whose diff bytes are wrong, so the result's hash differs) fails VERIFY and is never activated.
    @Test func aDamagedDeltaPatchFailsVerificationAndIsNeverActivated() async throws {
        let device = DeviceHarness(capabilities: [.resume, .delta])
        let running: [UInt8] = [1, 2, 3]
        let intended: [UInt8] = [1, 2, 4, 5]
        var patch = DeltaPatch.create(from: running, to: intended, compression: .none)
        patch[patch.count - 4] ^= 0x01  // a diff or extra byte, not the structure
        let start = NativeMessage.Start(
            target: .firmware, compressed: false, imageSize: UInt32(intended.count), streamSize: UInt32(patch.count),
            crc32: CRC32.checksum(intended), sha256: SHA256Digest.hash(intended), packetSize: UInt16(patch.count), ackInterval: 1,
            label: "2", deltaBaseSHA256: SHA256Digest.hash(running))
        try await device.send(.start(start))
        guard case .startResponse(let response) = try await device.reply() else {
            Issue.record("expected start response")
            return
        }
        #expect(response.status == .ok)
        try await device.send(.data(.init(sequence: 0, payload: patch)))
        _ = try await device.reply()  // ACK
        try await device.send(.verify)
        guard case .verifyResponse(let result) = try await device.reply() else {
            Issue.record("expected verify")
            return
        }
        #expect(result.status == .verifyFailed)
        try await device.send(.activate)
        guard case .error = try await device.reply() else {
            Issue.record("expected refusal")
            return
        }
        #expect(device.storage.snapshot.activeImage == running)
    }

    /// A patch for another base is refused at START, before any byte of it is sent.
    @Test func aDeltaPatchForAnotherBaseIsRefusedAtStart() async throws {
        let device = DeviceHarness(capabilities: [.delta])
        let start = NativeMessage.Start(
            target: .firmware, compressed: false, imageSize: 4, streamSize: 20, crc32: 0, sha256: Array(repeating: 1, count: 32),
            packetSize: 20, ackInterval: 1, label: "2", deltaBaseSHA256: SHA256Digest.hash([9, 9, 9]))
        try await device.send(.start(start))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected a refusal")
            return
        }
        #expect(error.status == .wrongBase)
        #expect(error.message.hasPrefix("the patch was made for sha256:"), "\(error.message)")
        // HELLO names the running image, so a host could have known.
        try await device.send(.hello(.init(minimumVersion: 1, maximumVersion: NativeMessage.version)))
        guard case .helloResponse(let hello) = try await device.reply() else {
            Issue.record("expected HELLO's answer")
            return
        }
        #expect(hello.capabilities.contains(.delta) && hello.runningSHA256 == SHA256Digest.hash([1, 2, 3]))
    }

    @Test func wrongLengthPacketIsRejected() async throws {
        let device = DeviceHarness()
        let start = NativeMessage.Start(
            target: .test, compressed: false, imageSize: 300, streamSize: 300, crc32: 0,
            sha256: [], packetSize: 150, ackInterval: 1, label: "")
        try await device.send(.start(start))
        _ = try await device.reply()
        try await device.send(.data(.init(sequence: 0, payload: [1, 2, 3])))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.message == "packet 0 carries 3 bytes, expected 150")
    }

    @Test func sequenceNumbersWrapAroundEndToEnd() async throws {
        // 70 000 one-byte packets: the 16-bit sequence number wraps once.
        let storage = DeviceStorage(activeImage: [0], activeVersion: "1", slotSize: 100_000)
        storage.withState { $0.bootToBootloader = true }
        let device = NativeDevice(name: "wrap", storage: storage, bufferCount: 64, maximumPacket: 244)
        let connector = LoopbackConnector(device: device)
        var image = [UInt8](repeating: 0, count: 70_000)
        for index in image.indices { image[index] = UInt8(truncatingIfNeeded: index &* 31 &+ index >> 8) }
        var tuning = TransferTuning(window: 64, compression: .off)  // every byte its own packet
        tuning.packetSize = 1
        let report = try await NativeUpdater(connector: connector, clock: connector.clock, tuning: tuning).flash(image: image, version: "w")
        #expect(report.statistics.packetsSent >= 70_000)
        #expect(storage.snapshot.activeImage == image)
    }
}

/// ACK_INTERVAL at the device: it changes how often the device acknowledges
/// within a transfer, and is refused outside one or by a device that cannot.
@Suite struct NativeDeviceAckIntervalTests {
    static let start = NativeMessage.Start(
        target: .firmware, compressed: false, imageSize: 200, streamSize: 200, crc32: 0,
        sha256: Array(repeating: 7, count: 32), packetSize: 10, ackInterval: 8, label: "2")

    static func data(_ index: Int) -> NativeMessage {
        .data(.init(sequence: UInt16(index), payload: Array(repeating: UInt8(index), count: 10)))
    }

    @Test func aNewIntervalTakesEffectAtOnce() async throws {
        let device = DeviceHarness()
        try await device.send(.start(Self.start))
        guard case .startResponse(let response) = try await device.reply() else {
            Issue.record("expected START's answer")
            return
        }
        #expect(response.status == .ok)
        try await device.send(.ackInterval(3))
        for index in 0..<3 { try await device.send(Self.data(index)) }
        guard case .ack(let first) = try await device.reply() else {
            Issue.record("expected an ACK after 3 packets")
            return
        }
        #expect(first.nextExpected == 3)
        // Back to 8: the next ACK comes after 8 more packets, not 3.
        try await device.send(.ackInterval(8))
        for index in 3..<11 { try await device.send(Self.data(index)) }
        guard case .ack(let second) = try await device.reply() else {
            Issue.record("expected an ACK after 8 more")
            return
        }
        #expect(second.nextExpected == 11)
    }

    @Test func outsideATransferItIsRefused() async throws {
        let device = DeviceHarness()
        try await device.send(.ackInterval(4))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.request == NativeMessage.Opcode.ackInterval.rawValue)
        #expect(error.status == .invalidState)
        #expect(error.message == "no transfer in progress: send START first")
    }

    @Test func aDeviceWithoutTheCapabilityRefusesIt() async throws {
        let device = DeviceHarness(capabilities: [.deflate, .resume])
        try await device.send(.start(Self.start))
        guard case .startResponse = try await device.reply() else {
            Issue.record("expected START's answer")
            return
        }
        try await device.send(.ackInterval(4))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.status == .unknownOpcode)
        #expect(error.message == "this device keeps the acknowledgement interval START named")
    }

    @Test func aZeroIntervalIsMalformed() async throws {
        let device = DeviceHarness()
        try await device.send(withCRC([0x15, 0x00, 0x00]))
        guard case .error(let error) = try await device.reply() else {
            Issue.record("expected an error")
            return
        }
        #expect(error.status == .malformed)
        #expect(error.message == "ackInterval.interval at offset 1: must be at least 1")
    }
}
