import BleotaCodec
import BleotaLink
import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaProtocols

/// Messages encoded by the `smp` package 4.2.0 (scripts/smp-vectors.py).
struct SMPVector: Decodable, Sendable, CustomTestStringConvertible {
    var name: String
    var hex: String
    var op: UInt8
    var version: UInt8
    var group: UInt16
    var sequence: UInt8
    var command: UInt8
    var length: UInt16
    var serial: [String]
    var testDescription: String { name }
    var bytes: [UInt8] { [UInt8](hex: hex)! }

    static let all: [SMPVector] = {
        let url = Bundle.module.url(forResource: "Fixtures/smp-4.2.0", withExtension: "json")!
        struct File: Decodable { var vectors: [SMPVector] }
        return try! JSONDecoder().decode(File.self, from: Data(contentsOf: url)).vectors
    }()
}

@Suite struct SMPMessageTests {
    @Test(arguments: SMPVector.all)
    func decodesAndReencodesTheReferenceBytes(_ vector: SMPVector) throws {
        let packet = try SMPPacket(decoding: vector.bytes)
        #expect(packet.header.operation.rawValue == vector.op)
        #expect(packet.header.version.rawValue == vector.version)
        #expect(packet.header.group.rawValue == vector.group)
        #expect(packet.header.sequence == vector.sequence)
        #expect(packet.header.command == vector.command)
        #expect(packet.header.length == vector.length)
        // Same header, same CBOR (keys kept in the order they came): the same bytes.
        #expect(packet.encode().hexString == vector.hex)
    }

    @Test(arguments: SMPVector.all)
    func serialFramingMatchesTheReferenceLines(_ vector: SMPVector) throws {
        let lines = SMPSerialFraming.encode(vector.bytes)
        #expect(lines.map(\.hexString) == vector.serial)
        var decoder = SMPSerialFraming.Decoder()
        var decoded: [UInt8]?
        for line in vector.serial.map({ [UInt8](hex: $0)! }) { decoded = try decoder.feed(line: Array(line.dropLast())) }
        #expect(decoded?.hexString == vector.hex)
    }

    @Test func typedBodiesMatchTheReference() throws {
        func body(_ name: String) throws -> CBOR { try SMPPacket(decoding: try #require(SMPVector.all.first { $0.name == name }).bytes).body }
        let upload = try SMPUploadRequest(body: try body("upload first chunk"))
        #expect(upload.offset == 0 && upload.length == 4096 && upload.sha == Array(0..<32) && upload.data == Array(0..<64) && upload.upgrade == false)
        let parameters = try MCUmgrParameters(body: try body("parameters response"))
        #expect(parameters == MCUmgrParameters(bufferSize: 2475, bufferCount: 4))
        let slots = try SMPImageSlot.list(from: try body("image state response"))
        #expect(slots == [SMPImageSlot(slot: 0, version: "1.0.0", hash: Array(0..<32), bootable: true, confirmed: true, active: true)])
        #expect(SMPDeviceError(response: try body("image error v2"))?.description == "the device's image group answered image already pending (rc 28)")
        #expect(SMPDeviceError(response: try body("error v1"))?.description == "the device answered not supported (rc 8)")
        let file = try SMPFileUploadRequest(body: try body("file upload"))
        #expect(file == SMPFileUploadRequest(name: "/lfs/a.txt", offset: 0, data: Array("abc".utf8), length: 3))
    }

    @Test func badFramesAreTypedErrors() {
        let echo = SMPVector.all.first { $0.name == "echo request" }!.bytes
        // Truncated header, length that disagrees, CBOR that is not a map, broken CBOR.
        #expect(throws: DecodingError.self) { try SMPPacket(decoding: Array(echo.prefix(5))) }
        #expect(throws: DecodingError.self) { try SMPPacket(decoding: echo + [0x00]) }
        #expect(throws: DecodingError.self) { try SMPPacket(decoding: [0x02, 0, 0, 1, 0, 0, 1, 0, 0x01]) }
        #expect(throws: DecodingError.self) { try SMPPacket(decoding: [0x02, 0, 0, 2, 0, 0, 1, 0, 0xA1, 0x61]) }
        #expect(throws: DecodingError.self) { try SMPPacket(decoding: [0x3F, 0, 0, 1, 0, 0, 1, 0, 0xA0]) }  // version 3
        var generator = seededGenerator("SMP frame corruption")
        for _ in 0..<5000 {
            var bytes = echo
            bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            // Whatever still decodes re-encodes to the same bytes (but the header's three
            // reserved bits, which Zephyr ignores too): nothing is silently misread.
            var unreserved = bytes
            unreserved[0] &= 0x1F
            if let packet = try? SMPPacket(decoding: bytes) { #expect(packet.encode() == unreserved) }
        }
        var decoder = SMPSerialFraming.Decoder()
        var line = SMPSerialFraming.encode(echo)[0]
        line[5] ^= 0x01
        #expect(throws: SMPSerialFraming.Failure.self) { try decoder.feed(line: Array(line.dropLast())) }
        #expect((try? decoder.feed(line: Array("uart:~$ console text".utf8))) == .some(nil))
    }

    @Test func reassemblyFollowsTheHeaderLength() {
        let messages = SMPVector.all.prefix(3).map(\.bytes)
        let stream = Array(messages.joined())
        var reassembler = SMPReassembler()
        var out: [[UInt8]] = []
        var index = stream.startIndex
        while index < stream.endIndex {
            let end = min(stream.endIndex, index + 5)
            out += reassembler.feed(Array(stream[index..<end]))
            index = end
        }
        #expect(out == messages)
        #expect(reassembler.isEmpty)
    }
}

/// A device played from a script, to check what the client makes of bad answers.
final class ScriptedSMPLink: Link, @unchecked Sendable {
    let parameters = LinkParameters(maximumPayload: 512, description: "scripted")
    let inbox = Mailbox<[UInt8]>()
    let answer: @Sendable (SMPPacket) -> [[UInt8]]
    init(answer: @escaping @Sendable (SMPPacket) -> [[UInt8]]) { self.answer = answer }
    func send(_ packet: [UInt8]) async throws(LinkError) {
        guard let request = try? SMPPacket(decoding: packet) else { return }
        for reply in answer(request) { inbox.put(reply) }
    }
    func receive() async throws(LinkError) -> [UInt8] {
        do {
            guard let packet = try await inbox.take() else { throw LinkError.disconnected("closed") }
            return packet
        } catch { throw .cancelled }
    }
    func close() async { inbox.close() }
}

@Suite struct SMPClientTests {
    static func reply(to request: SMPPacket, sequence: UInt8? = nil, body: CBOR) -> [UInt8] {
        SMPPacket(
            request.header.operation.response, group: request.header.group, command: request.header.command,
            sequence: sequence ?? request.header.sequence, body: body
        ).encode()
    }

    @Test func aResponseWithAnotherSequenceNumberIsAProtocolError() async {
        let link = ScriptedSMPLink { [Self.reply(to: $0, sequence: $0.header.sequence &+ 7, body: .textMap(["r": .text("x")]))] }
        let connection = SMPConnection(link: link, clock: SystemClock())
        await #expect(throws: SMPClientError.sequence("the device answered sequence 7 to request 0 (echo)")) {
            _ = try await connection.echo("x", timeout: .seconds(1))
        }
    }

    @Test func malformedCBORIsNamed() async {
        let link = ScriptedSMPLink { request in
            var bytes = Self.reply(to: request, body: .textMap(["r": .text("x")]))
            bytes[SMPHeader.size] = 0xBF  // an indefinite map that never ends
            return [bytes]
        }
        let connection = SMPConnection(link: link, clock: SystemClock())
        do {
            _ = try await connection.echo("x", timeout: .seconds(1))
            Issue.record("a malformed answer was accepted")
        } catch {
            #expect(error.description.hasPrefix("the device sent a malformed SMP response: "))
        }
    }

    @Test func aTruncatedHeaderIsNoAnswerAndTimesOut() async {
        let link = ScriptedSMPLink { request in [Array(Self.reply(to: request, body: .map([])).prefix(5))] }
        let connection = SMPConnection(link: link, clock: SystemClock())
        await #expect(throws: SMPClientError.timeout("echo after 2 tries")) {
            _ = try await connection.request(
                .write, group: 0, command: 0, body: .textMap(["d": .text("x")]),
                timeout: .milliseconds(50), attempts: 2, what: "echo")
        }
    }

    @Test func aDeviceErrorCodeBecomesItsMessage() async {
        let link = ScriptedSMPLink { [Self.reply(to: $0, body: .textMap(["err": .textMap(["group": CBOR(1), "rc": CBOR(9)])]))] }
        let connection = SMPConnection(link: link, clock: SystemClock())
        do {
            _ = try await connection.imageState(timeout: .seconds(1))
            Issue.record("an error answer was accepted")
        } catch {
            #expect(error.description == "the device's image group answered no free slot (rc 9)")
        }
    }

    @Test func aSchemaViolationIsNamed() async {
        let link = ScriptedSMPLink { [Self.reply(to: $0, body: .textMap(["buf_size": .text("big"), "buf_count": CBOR(4)]))] }
        let connection = SMPConnection(link: link, clock: SystemClock())
        await #expect(throws: SMPClientError.field("the MCUmgr parameters's 'buf_size' is \"big\", not an integer")) {
            _ = try await connection.parameters(timeout: .seconds(1))
        }
    }
}

/// Slot info (image group, command 6) and MCUboot's mode names.
@Suite struct SMPSlotInfoAndModeTests {
    /// As smp_group_1.rst lays it out: images, each with its slots; the upload's slot names the upload image id.
    @Test func slotInfoDecodesAndEncodesAsZephyrSendsIt() throws {
        let body = CBOR.textMap([
            "images": .array([
                .textMap([
                    "image": CBOR(0),
                    "slots": .array([
                        .textMap(["slot": CBOR(0), "size": CBOR(0x69000)]),
                        .textMap(["slot": CBOR(1), "size": CBOR(0x69000), "upload_image_id": CBOR(0)]),
                    ]),
                ]),
                .textMap([
                    "image": CBOR(1),
                    "slots": .array([.textMap(["slot": CBOR(0), "size": CBOR(0x40000)]), .textMap(["slot": CBOR(1), "size": CBOR(0x40000)])]),
                    "max_image_size": CBOR(0x3F000),
                ]),
            ])
        ])
        let info = try SMPSlotInfo(body: body)
        #expect(info.images.map(\.image) == [0, 1])
        #expect(info.uploadLimit(image: 0) == 0x69000)
        #expect(info.uploadLimit(image: 1) == 0x3F000, "max_image_size wins over the slot's size")
        #expect(info.uploadLimit(image: 2) == nil)
        #expect(try SMPSlotInfo(body: info.body) == info)
        #expect(throws: SMPBody.FieldError.self) { try SMPSlotInfo(body: .textMap(["images": .array([.textMap(["image": CBOR(0)])])])) }
        #expect(throws: SMPBody.FieldError.self) { try SMPSlotInfo(body: .map([])) }
        #expect(SMPCommand.slotInfo.description == "slot info")
    }

    /// MCUboot's `enum mcuboot_mode` (boot_status.h): 0 is single slot, not "application".
    @Test func everyMCUbootModeIsNamedAsMCUbootNamesIt() {
        let names = (-1...10).map(SMPBootloaderInfo.modeName)
        #expect(
            names == [
                "mode unknown to the device's MCUmgr", "single slot", "swap using scratch", "upgrade only (overwrite)", "swap using move",
                "direct XIP without revert", "direct XIP with revert", "RAM load", "firmware loader", "single slot RAM load",
                "swap using offset", "mode 10",
            ])
    }
}
