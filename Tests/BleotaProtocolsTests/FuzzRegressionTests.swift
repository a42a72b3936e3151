import BleotaCodec
import BleotaEngine
import BleotaLink
import Testing

@testable import BleotaProtocols

/// Inputs the fuzzers in Fuzz/ found (docs/testing.md, "Fuzzing"), each fed to what
/// trapped or misbehaved on it, so the fix stays fixed.
@Suite struct FuzzRegressionTests {
    /// An image check's marker with an odd number of hex digits trapped the description reader
    /// (FuzzProtocolDescription): it stepped two characters at a time past the end.
    @Test(arguments: ["4b 4ec 4154", "4", "4b 4é", "zz"])
    func aMarkerOfOddOrForeignDigitsIsAnErrorNamingItsLine(_ marker: String) throws {
        let yaml = """
            bleota-protocol: 1
            name: m
            service: 1234
            characteristics: {d: {uuid: 1235, write: command}}
            messages:
              d: {characteristic: d, fields: [{u16: index}, payload]}
              e: {characteristic: d, fields: [{bytes: "02"}]}
            image:
              checks:
                - {marker: "\(marker)", at: 8}
            update: {end: {send: e}}
            transfer: {packet: d, flow: {mode: none}}
            """
        #expect(throws: ProtocolDescriptionError.self) { try ProtocolDescription(yaml: yaml, source: "m.yaml") }
        do { _ = try ProtocolDescription(yaml: yaml, source: "m.yaml") } catch {
            #expect(error.description.hasPrefix("m.yaml:10: image.checks[0].marker: "), "\(error)")
        }
    }

    /// A file-hash request with a negative `len` trapped the SMP device
    /// (FuzzSMPDevice): it built the range `off..<off+len` backwards.
    @Test func aNegativeFileHashLengthIsInvalidNotATrap() async throws {
        let storage = SMPDeviceStorage(primary: MCUbootImage.build(firmware: [1, 2, 3], version: .init(major: 1, minor: 0, revision: 0, build: 0)))
        storage.withState { $0.files["/lfs/hello.txt"] = Array("Hello, world\n".utf8) }
        let device = SMPDevice(storage: storage)
        let environment = DeviceEnvironment(clock: SystemClock()) { _ in }
        // The fuzzer's input: read, group 8, command 2, {"name": "/lfs/hello.txt", "off": 4, "len": -8}.
        let message = try #require([UInt8](hex: "0800001f00080002a3646e616d656e2f6c66732f68656c6c6f2e747874636f666604636c656e27"))
        let answer = try #require(await device.respond(to: message, environment: environment))
        #expect(answer.0.body == .textMap(["rc": CBOR(3)]))  // EINVAL
        let hash = try #require(
            await device.respond(
                to: SMPPacket(
                    .read, command: .fileHash, sequence: 1,
                    body: .textMap(["name": .text("/lfs/hello.txt"), "off": CBOR(4), "len": CBOR(5)])
                ).encode(), environment: environment))
        #expect(hash.0.body["len"] == CBOR(5))
    }

    /// An upload's first chunk with a negative `len` trapped the SMP device
    /// when it stored the finished upload (FuzzSMPDevice): Zephyr decodes
    /// `len` unsigned and answers EINVAL.
    @Test func aNegativeUploadLengthIsInvalidNotATrap() async throws {
        let device = SMPDevice(storage: SMPDeviceStorage(primary: SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0))))
        let environment = DeviceEnvironment(clock: SystemClock()) { _ in }
        // The fuzzer's first message: write, image upload, {"image": 0, "len": -65, "off": 0, "sha": h'…', "data": h'3db8f396…'}.
        let message = try #require(
            [UInt8](
                hex: "0a00006000010001a565696d61676500636c656e3840636f666600637369615820bc0de8a082976dadd609ddeb8bb508"
                    + "000000010100a02fa576fbda5717a7ba70646461746158203db8f3960000320028000001000000000000000000000000"
                    + "0000000000000000"))
        let answer = try #require(await device.respond(to: message, environment: environment))
        #expect(answer.0.body == .textMap(["rc": CBOR(3)]))  // EINVAL
        let negativeOffset = SMPPacket(.write, command: .imageUpload, sequence: 2, body: .textMap(["off": CBOR(-1), "data": .bytes([1])]))
        #expect(await device.respond(to: negativeOffset.encode(), environment: environment)?.0.body == .textMap(["rc": CBOR(3)]))
    }

    /// A malformed CBOR body was reported at an offset counted from the body,
    /// which pointed into the 8-byte header (FuzzSMPPacket).
    @Test func cborErrorsInAnSMPBodyGiveTheMessagesOffset() throws {
        // The fuzzer's input: a header, then {h'…' where 0x5E is a reserved additional-information value.
        let message = try #require([UInt8](hex: "0b00000600090c00a15e6f666603"))
        #expect(throws: DecodingError(field: "CBOR initial byte", offset: 9, reason: .invalidValue("additional information 30 is reserved"))) {
            try SMPPacket(decoding: message)
        }
    }

    /// A message longer than the reassembler's limit was dropped only when
    /// it came in pieces; arriving whole in one packet, it was passed on
    /// (FuzzSMPReassembler).
    @Test func aMessageOverTheLimitIsDroppedEvenInOnePacket() throws {
        // The fuzzer's input: a 9-byte limit, 13 bytes of an echo request, a reset, then the echo request whole and more.
        var reassembler = SMPReassembler(limit: 9)
        #expect(reassembler.feed(try #require([UInt8](hex: "0a00000900000100a161646568"))).isEmpty)
        reassembler.reset()
        let rest = try #require(
            [UInt8](
                hex: "0a00000900000100a161646568656c6c6f0b00000901000000a161726d68656c6c6f0800000100000206a0"
                    + "0900001800000206a2686275665f73697a651909ab30696275665f636f75"))
        let messages = reassembler.feed(rest)
        #expect(messages == [try #require([UInt8](hex: "0800000100000206a0"))])
        #expect(messages.allSatisfy { $0.count <= 9 })
    }

    /// A host pulling a file crashed the device by acknowledging packets the
    /// device had not sent yet, after the device asked for an
    /// acknowledgement: its sender's bookkeeping ran backwards (FuzzNativeDevice).
    @Test func aPullAcknowledgedBeyondWhatWasSentLeavesTheDeviceServing() async throws {
        // On virtual time: the device, and every wait for its answers (a real deadline would pass by
        // accident on a loaded machine).
        let answered = try await SimulationRuntime.run { runtime in
            let device = DeviceHarness(runtime: runtime)
            // The fuzzer's packets: HELLO, START a 100-byte file "notes.txt", its DATA, VERIFY.
            for hex in [
                "010101",
                "03010064000000640000004e9349525b46fd3cff72161180901a1040fc85772358e7c6614e346e6603011d16c81fc5c8000800096e6f7465732e747874",
                "10000000000120018100000182000005820000098200000d8200001182000015820000198200001d8200002182000025820000298200002d82000031820000"
                    + "35820000398200003d8200004182000045820000498200004d820000518200005582000059820000",
                "05",
            ] {
                try await device.send(withCRC(try #require([UInt8](hex: hex))))
                let reply = try await device.reply()
                if case .verifyResponse(let result) = reply { #expect(result.status == .ok) }
            }
            // GET_FILE one byte a packet, window 6: the device sends 6 packets and asks for an acknowledgement.
            try await device.send(withCRC(try #require([UInt8](hex: "09096e6f7465732e747874010004580600"))))
            let sawRequest = try await withDeadline(.seconds(10), clock: runtime.clock) {
                while true { if case .ackRequest = try await device.reply() { return true } }
            }
            #expect(sawRequest)
            // The fuzzer's ACK: next expected 0x0E0F with a 13-byte bitmap, all far beyond what was sent.
            try await device.send(withCRC(try #require([UInt8](hex: "110f0e0d11111111111111111111111111"))))
            // The device finishes the pull and serves on. (HELLO goes again until answered: the pull's
            // reader may still take the first one.)
            var answered = false
            for _ in 0..<20 where !answered {
                try await device.send(.hello(.init()))
                do {
                    answered = try await withDeadline(.milliseconds(500), clock: runtime.clock) {
                        while true { if case .helloResponse = try await device.reply() { return true } }
                    }
                } catch is DeadlineExceeded {}
            }
            await device.host.close()
            return answered
        }
        #expect(answered)
    }
}
