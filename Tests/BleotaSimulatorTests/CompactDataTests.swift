import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import Testing

@testable import BleotaSimulator

/// Compact data headers on the 23-byte ATT MTU: one byte instead of five.
@Suite struct CompactDataTests {
    /// The data packets the device received, from the simulator's trace: (first byte, length).
    static func dataPackets(_ run: SimulatedRun) -> [(first: UInt8, length: Int)] {
        run.trace.compactMap { line -> (UInt8, Int)? in
            guard line.contains(" > "), line.hasSuffix(" ok") else { return nil }
            let fields = line.split(separator: " ")
            guard let op = fields.first(where: { $0.hasPrefix("op=") }).flatMap({ UInt8($0.dropFirst(3), radix: 16) }),
                let length = fields.first(where: { $0.hasPrefix("len=") }).flatMap({ Int($0.dropFirst(4)) })
            else { return nil }
            return (op, length)
        }.filter { NativeMessage.CompactData.isCompactData([$0.0]) || $0.0 == NativeMessage.Opcode.data.rawValue }
    }

    @Test func theFirstByteRangeHoldsNoOpcode() {
        for opcode in NativeMessage.Opcode.allCases {
            #expect(!NativeMessage.CompactData.isCompactData([opcode.rawValue]))
            #expect(!NativeMessage.CompactData.isCompactData([opcode.responseCode]))
        }
        #expect(NativeMessage.CompactData.isCompactData([0x20]))
        #expect(NativeMessage.CompactData.isCompactData([0x7F]))
        #expect(!NativeMessage.CompactData.isCompactData([0x80]))
        #expect(!NativeMessage.CompactData.isCompactData([]))
    }

    /// Index → one byte → index, around every reference the receiver may hold.
    @Test(arguments: [(0, 0), (95, 90), (96, 90), (130, 100), (65_535, 65_530), (65_536, 65_530), (1_000_000, 999_980)])
    func indexesSurviveTheOneByteHeader(index: Int, reference: Int) {
        let packet = NativeMessage.CompactData.encode(index: index, payload: [1, 2, 3])
        #expect(packet.count == 4)
        #expect(packet[0] == 0x20 + UInt8(index % 96))
        #expect(NativeMessage.CompactData.index(of: packet, near: reference) == index)
        #expect(Array(packet.dropFirst()) == [1, 2, 3])
    }

    @Test func unwrappingModuloAnyNumberPicksTheNearest() {
        #expect(SequenceNumber.unwrap(5, modulus: 96, near: 100) == 101)
        #expect(SequenceNumber.unwrap(95, modulus: 96, near: 100) == 95)
        #expect(SequenceNumber.unwrap(0, modulus: 96, near: 0) == 0)
        #expect(SequenceNumber.unwrap(90, modulus: 96, near: 3) == -6)
    }

    /// Over MTU 23 every data packet is 20 bytes with a one-byte header, the image arrives whole
    /// across several wraps of the 96-number sequence, and no data packet carries the full header.
    @Test func aSmallMTUFlashGoesWithOneByteHeaders() async throws {
        let firmware = image(19 * 400 + 7, seed: 31)
        let run = try await simulateFlash("sim://1m-no-dle-30ms?seed=3", firmware: firmware)
        expectSafe(run, firmware: firmware)
        #expect(try run.outcome.get().packetSize == 19)
        let data = Self.dataPackets(run)
        #expect(data.count >= 401)
        #expect(data.allSatisfy { NativeMessage.CompactData.isCompactData([$0.first]) })
        #expect(data.dropLast().allSatisfy { $0.length == 20 } || data.filter { $0.length == 20 }.count >= 400)
    }

    @Test func aLargeMTUKeepsTheFullHeaderAndItsCRC() async throws {
        let firmware = image(20_000, seed: 32)
        let run = try await simulateFlash("sim://2m-dle?seed=3", firmware: firmware)
        expectSafe(run, firmware: firmware)
        let data = Self.dataPackets(run)
        #expect(!data.isEmpty)
        #expect(data.allSatisfy { $0.first == NativeMessage.Opcode.data.rawValue })
    }

    /// Corruption the link layer's CRC would have caught, let through by the simulator: with no
    /// per-packet CRC the device finds it at VERIFY, and the host sends the image again with full
    /// headers. The device never activates a damaged image.
    @Test(arguments: [1, 2, 3])
    func damageInACompactTransferIsCaughtAtVerifyAndResentWithCRCs(seed: Int) async throws {
        let firmware = image(19 * 150, seed: 33)
        // At 5 % about 7 of the 150 data packets arrive damaged.
        let run = try await simulateFlash("sim://1m-no-dle-30ms?corrupt=0.05&seed=\(seed)", firmware: firmware)
        expectSafe(run, firmware: firmware)
        #expect(run.statistics.corrupted > 0)
        #expect(run.notes.contains { $0.contains("sending it again with a CRC on every packet") })
        #expect(Self.dataPackets(run).contains { $0.first == NativeMessage.Opcode.data.rawValue })
    }

    @Test func aDeviceWithoutTheCapabilityRefusesACompactStart() async throws {
        let storage = DeviceStorage(slotSize: 4096)
        storage.withState { $0.bootToBootloader = true }
        let device = NativeDevice(
            name: "old", storage: storage, bufferCount: 4, maximumPacket: 20,
            capabilities: [.deflate, .testTransfer, .files, .resume])
        let (host, deviceEnd) = LoopbackLink.pair(maximumPayload: 20)
        let clock = SystemClock()
        let serving = Task { await device.serve(deviceEnd, environment: NativeDeviceEnvironment(clock: clock) { _ in }) }
        defer { serving.cancel() }
        let start = NativeMessage.Start(
            target: .firmware, compressed: false, compact: true, imageSize: 100, streamSize: 100,
            crc32: 0, sha256: [UInt8](repeating: 0, count: 32), packetSize: 19, ackInterval: 2, label: "2")
        try await NativeFraming.send(.start(start), on: host)
        var reassembler = NativeReassembler()
        var reply: NativeMessage?
        while reply == nil { reply = reassembler.feed(try await host.receive()).flatMap { try? NativeMessage(decoding: $0) } }
        guard case .error(let error) = reply else {
            Issue.record("expected an error, got \(String(describing: reply))")
            return
        }
        #expect(error.status == .badParameter)
        #expect(error.message.contains("compact"))
        await host.close()
    }
}
