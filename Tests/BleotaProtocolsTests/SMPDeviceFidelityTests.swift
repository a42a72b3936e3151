import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation
import Testing

@testable import BleotaProtocols

/// The simulated device answers as Zephyr's `os_mgmt`, `img_mgmt` and `fs_mgmt`
/// do (protocols/smp.md, "What the simulated device does"), request by request.
@Suite struct SMPDeviceFidelityTests {
    static let samples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("samples/mcuboot/imgtool-2.5.0")
    static func sample(_ name: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: samples.appendingPathComponent(name))) }

    let device = SMPDevice(storage: SMPDeviceStorage(primary: SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0))))
    let environment = DeviceEnvironment(clock: SystemClock()) { _ in }
    var sequence: UInt8 = 0

    /// Sends one request; returns the answer's body and what the device does afterwards.
    mutating func ask(
        _ operation: SMPHeader.Operation, _ command: SMPCommand, _ body: CBOR = .map([]), version: SMPHeader.Version = .v2,
        raw: [UInt8]? = nil
    ) async throws -> (CBOR, SMPDevice.Aftermath) {
        sequence &+= 1
        var bytes = SMPPacket(operation, command: command, sequence: sequence, version: version, body: body).encode()
        if let raw {
            bytes = Array(bytes.prefix(SMPHeader.size)) + raw
            bytes[2] = UInt8(raw.count >> 8)
            bytes[3] = UInt8(truncatingIfNeeded: raw.count)
        }
        let (answer, after) = try #require(await device.respond(to: bytes, environment: environment))
        #expect(answer.header.sequence == sequence && answer.header.version == version && answer.header.smpCommand == command)
        return (answer.body, after)
    }

    mutating func upload(_ image: [UInt8], chunk: Int = 1000, imageNumber: Int = 0) async throws -> CBOR {
        var offset = 0
        var last = CBOR.map([])
        while offset < image.count {
            let end = min(image.count, offset + chunk)
            let request =
                offset == 0
                ? SMPUploadRequest(image: imageNumber, offset: 0, data: Array(image[0..<end]), length: image.count, sha: SHA256Digest.hash(image))
                : SMPUploadRequest(offset: offset, data: Array(image[offset..<end]))
            (last, _) = try await ask(.write, .imageUpload, request.body)
            guard let next = last["off"]?.int else { return last }
            offset = next
        }
        return last
    }

    mutating func testBoot(_ image: [UInt8]) async throws {
        _ = try await upload(image)
        let hash = try #require(try MCUbootImage(decoding: image).hashTLV)
        _ = try await ask(.write, .imageState, SMPImageStateWriteRequest(hash: hash, confirm: false).body)
        await device.powerCycle()
    }

    @Test mutating func echoIsServedForReadAndWrite() async throws {
        #expect(try await ask(.read, .echo, .textMap(["d": .text("r")])).0 == SMPEchoResponse(text: "r").body)
        #expect(try await ask(.write, .echo, .textMap(["d": .text("w")])).0 == SMPEchoResponse(text: "w").body)
        #expect(try await ask(.write, .echo, .textMap(["d": CBOR(5)])).0 == .textMap(["rc": CBOR(3)]))
    }

    /// Zephyr serves only reads and writes: a response sent to it, or an op
    /// 4…7, is answered ENOTSUP as a write's response (smp_rsp_op), keeping
    /// group, sequence and command; nothing is left unanswered.
    @Test func operationsOtherThanReadAndWriteAreNotSupported() async throws {
        for op: UInt8 in [1, 3, 4, 6, 7] {
            let message: [UInt8] = [op, 0, 0, 1, 0, 0, 9, 0, 0xA0]  // echo, sequence 9, body {}
            let (answer, after) = try #require(await device.respond(to: message, environment: environment))
            #expect(answer.header.operation == .writeResponse, "op \(op)")
            #expect(answer.header.group == .os && answer.header.sequence == 9 && answer.header.command == 0)
            #expect(answer.body == .textMap(["rc": CBOR(8)]), "op \(op)")
            #expect(after == .none)
        }
        #expect(await device.respond(to: [2, 0, 0, 0, 0, 0, 1], environment: environment) == nil)  // 7 bytes: no header
    }

    @Test mutating func resetIgnoresItsBody() async throws {
        #expect(try await ask(.write, .reset).1 == .reset)
        #expect(try await ask(.write, .reset, raw: []).1 == .reset)
        #expect(try await ask(.write, .reset, raw: [0xFF, 0x00, 0x13]).1 == .reset)
        #expect(try await ask(.read, .reset).0 == .textMap(["rc": CBOR(8)]), "reset is write-only")
    }

    @Test mutating func anUploadNamingImageOneGoesToTheSecondarySlot() async throws {
        let image = try Self.sample("app-1.1.0-ecdsa-p256.bin")
        #expect(try await upload(image, imageNumber: 1)["off"]?.int == image.count)
        #expect(device.storage.snapshot.secondary == image)
    }

    @Test mutating func duringATestBootTheRunningImageIsUnconfirmedAndThePreviousOneConfirmed() async throws {
        try await testBoot(try Self.sample("app-1.1.0-ecdsa-p256.bin"))
        let slots = device.storage.slots
        #expect(slots[0].version == "1.1.0" && slots[0].active && !slots[0].confirmed)
        #expect(slots[1].version == "1.0.0" && slots[1].confirmed && !slots[1].active && !slots[1].pending)
    }

    @Test mutating func anUploadWhileATestImageRunsIsRefusedAndTheWayBackKept() async throws {
        try await testBoot(try Self.sample("app-1.1.0-ecdsa-p256.bin"))
        let other = try Self.sample("app-1.2.0+7-ed25519.bin")
        let first = SMPUploadRequest(offset: 0, data: Array(other[0..<500]), length: other.count, sha: SHA256Digest.hash(other))
        #expect(try await ask(.write, .imageUpload, first.body).0 == SMPDeviceError(.image(.noFreeSlot)).body)
        #expect(try await ask(.write, .imageUpload, first.body, version: .v1).0 == .textMap(["rc": CBOR(6)]), "v1: bad state")
        #expect(try await ask(.write, .imageErase, .textMap(["slot": CBOR(1)])).0 == SMPDeviceError(.image(.noFreeSlot)).body)
        // A reset now reverts: the previous image comes back, confirmed.
        await device.powerCycle()
        #expect(device.storage.slots[0].version == "1.0.0" && device.storage.slots[0].confirmed)
    }

    @Test mutating func aTamperedImageIsMarkedButMCUbootRefusesItAtBootAndErasesIt() async throws {
        var image = try Self.sample("app-1.1.0-ecdsa-p256.bin")
        image[0x200 + 100] ^= 0x01  // the firmware changes; the hash TLV does not
        _ = try await upload(image)
        let hash = try #require(try MCUbootImage(decoding: image).hashTLV)
        let (marked, _) = try await ask(.write, .imageState, SMPImageStateWriteRequest(hash: hash, confirm: false).body)
        #expect(try SMPImageStateResponse(body: marked).slots.last?.pending == true, "Zephyr marks without validating")
        #expect(device.storage.boot() == "the secondary image does not verify: erased it, kept the primary")
        #expect(device.storage.slots.count == 1 && device.storage.slots[0].version == "1.0.0")
    }

    @Test mutating func uploadOffsetsFollowZephyr() async throws {
        let image = try Self.sample("app-1.1.0-ecdsa-p256.bin")
        let sha = SHA256Digest.hash(image)
        #expect(
            try await ask(.write, .imageUpload, SMPUploadRequest(offset: 0, data: Array(image[0..<600]), length: image.count, sha: sha).body).0
                == SMPUploadResponse(offset: 600).body)
        // A chunk at the wrong offset is dropped and answered with where the device is, not an error.
        #expect(try await ask(.write, .imageUpload, SMPUploadRequest(offset: 900, data: [1, 2, 3]).body).0 == SMPUploadResponse(offset: 600).body)
        // The same image again (by its SHA) resumes; nothing is written.
        #expect(
            try await ask(.write, .imageUpload, SMPUploadRequest(offset: 0, data: Array(image[0..<100]), length: image.count, sha: sha).body).0
                == SMPUploadResponse(offset: 600).body)
        // A first chunk without its length is refused, and the upload is forgotten.
        #expect(
            try await ask(.write, .imageUpload, SMPUploadRequest(offset: 0, data: Array(image[0..<100])).body).0
                == SMPDeviceError(.image(.invalidLength)).body)
        #expect(
            try await ask(.write, .imageUpload, SMPUploadRequest(offset: 600, data: Array(image[600..<700])).body).0
                == SMPUploadResponse(offset: 0).body)
        // Fewer than 32 bytes cannot hold the image header.
        #expect(
            try await ask(.write, .imageUpload, SMPUploadRequest(offset: 0, data: Array(image[0..<20]), length: image.count).body).0
                == SMPDeviceError(.image(.invalidImageHeader)).body)
        // The last chunk says whether the whole upload matched its SHA.
        #expect(try await upload(image)["match"]?.boolean == true)
    }

    @Test mutating func fileSystemAndOSCommandsZephyrServes() async throws {
        let file = Array("0123456789".utf8)
        _ = try await ask(.write, .file, SMPFileUploadRequest(name: "/lfs/a.txt", offset: 0, data: file, length: file.count).body)
        #expect(try await ask(.read, .fileStatus, .textMap(["name": .text("/lfs/a.txt")])).0 == SMPFileStatus(length: 10).body)
        #expect(try await ask(.read, .fileStatus, .textMap(["name": .text("/lfs/none")])).0 == SMPDeviceError(.fileSystem(.fileNotFound)).body)
        let hash = try SMPFileHash(body: try await ask(.read, .fileHash, SMPFileHashRequest(name: "/lfs/a.txt").body).0)
        #expect(hash.type == "crc32" && hash.output == CBOR(Int(CRC32.checksum(file))) && hash.length == 10)
        let types = try SMPFileHashTypes(body: try await ask(.read, .fileHashTypes).0)
        #expect(types.types.map(\.name) == ["crc32", "sha256"] && types.types[1].kind == .init(format: 1, size: 32))
        #expect(try await ask(.write, .fileClose).0 == .map([]))
        // A chunk at the wrong offset is refused with the offset expected (v2), or a general code (v1).
        _ = try await ask(.write, .file, SMPFileUploadRequest(name: "/lfs/b.txt", offset: 0, data: [1, 2], length: 4).body)
        let wrong = try await ask(.write, .file, SMPFileUploadRequest(name: "/lfs/b.txt", offset: 3, data: [3]).body).0
        #expect(wrong["err"]?["rc"]?.int == 11 && wrong["len"]?.int == 2)
        #expect(try await ask(.read, .applicationInfo, .textMap(["format": .text("sn")])).0 == SMPApplicationInfo(output: "Zephyr bleota-smp").body)
        #expect(try await ask(.read, .applicationInfo).0 == SMPApplicationInfo(output: "Zephyr").body)
        #expect(try await ask(.read, .applicationInfo, .textMap(["format": .text("q")])).0 == SMPDeviceError(.os(.invalidFormat)).body)
    }

    @Test mutating func groupErrorsReachAVersionOneClientAsGeneralCodes() async throws {
        let unknown = SMPImageStateWriteRequest(hash: [UInt8](repeating: 0xAB, count: 32), confirm: false).body
        #expect(try await ask(.write, .imageState, unknown).0 == SMPDeviceError(.image(.hashNotFound)).body)
        #expect(try await ask(.write, .imageState, unknown, version: .v1).0 == .textMap(["rc": CBOR(1)]))
        #expect(try await ask(.read, .fileStatus, .textMap(["name": .text("/x")]), version: .v1).0 == .textMap(["rc": CBOR(5)]))
    }

    @Test func bleReassemblyHasNoTimeoutAndAnOverflowDropsBoth() async {
        let device = SMPDevice(storage: SMPDeviceStorage(primary: SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0))))
        let message = SMPPacket(.write, command: .echo, sequence: 1, body: .textMap(["d": .text(String(repeating: "x", count: 40))])).encode()
        #expect(await device.collect(Array(message.prefix(20))) == nil)
        #expect(await device.collect(Array(message[20...])) == message, "the rest completes it")
        // A lost middle write: the next request's first write overflows the partial one; both are gone.
        #expect(await device.collect(Array(message.prefix(20))) == nil)
        #expect(await device.collect(Array(message.prefix(40))) == nil)
        #expect(await device.collect(message) == message, "and the one after starts clean")
        // Fewer than a header's bytes, or a header that claims more than the buffer holds: dropped.
        #expect(await device.collect([0x02, 0x00]) == nil)
        #expect(await device.collect([0x0A, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x01, 0x00]) == nil)
    }
}
