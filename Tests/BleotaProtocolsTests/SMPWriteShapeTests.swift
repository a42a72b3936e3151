import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaTestSupport
import Testing

@testable import BleotaProtocols

/// Where requests are cut into writes, and what a lost write can do on a
/// device that reassembles as Zephyr does (``SMPDevice/collect(_:)``).
@Suite struct SMPWriteShapeTests {
    static let payload = 244
    static let bufferSize = 2475

    static func device() -> SMPDevice {
        SMPDevice(
            storage: SMPDeviceStorage(primary: SMPDevice.factoryImage(version: .init(major: 1, minor: 0, revision: 0, build: 0))),
            parameters: MCUmgrParameters(bufferSize: bufferSize, bufferCount: 4))
    }

    static func randomBytes(_ count: Int, using random: inout SeededRandom) -> [UInt8] {
        (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }

    /// An upload request as bleota encodes it, or with `off` first as it used to.
    static func uploadRequest(offset: Int, data: [UInt8], sequence: UInt8, offsetFirst: Bool = false) -> [UInt8] {
        let body: CBOR =
            offsetFirst
            ? .map([(.text("off"), CBOR(offset)), (.text("data"), .bytes(data))])
            : SMPUploadRequest(offset: offset, data: data).body
        return SMPPacket(.write, command: .imageUpload, sequence: sequence, body: body).encode()
    }

    static func cutPlainly(_ bytes: [UInt8]) -> [Range<Int>] {
        stride(from: 0, to: bytes.count, by: payload).map { $0..<min(bytes.count, $0 + payload) }
    }

    @Test func writesCoverTheRequestInOrderAndNoneIsLongerThanTheLink() {
        var random = seededGenerator("write shape coverage")
        let shape = SMPWriteShape(payload: Self.payload, bufferSize: Self.bufferSize)
        for _ in 0..<300 {
            let bytes = Self.randomBytes(Int.random(in: 1...2475, using: &random), using: &random)
            let writes = shape.writes(of: bytes)
            #expect(writes.first?.lowerBound == 0)
            #expect(writes.last?.upperBound == bytes.count)
            #expect(zip(writes, writes.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
            #expect(writes.allSatisfy { !$0.isEmpty && $0.count <= Self.payload })
            #expect(writes.dropLast().allSatisfy { $0.count >= Self.payload - shape.slack }, "each write at most the slack short of the link's")
        }
    }

    /// Where the device's reassembly does not matter, messages go out in the link's largest writes.
    @Test func largestWritesCutEveryPayloadWhereItFalls() {
        var random = seededGenerator("largest writes")
        let shape = SMPWriteShape.largestWrites(payload: Self.payload)
        for _ in 0..<200 {
            let bytes = Self.randomBytes(Int.random(in: 1...3000, using: &random), using: &random)
            #expect(shape.writes(of: bytes) == Self.cutPlainly(bytes))
        }
    }

    /// Every write after a request's first, taken by the device for the start of a
    /// request (as after a lost write), is dropped at once: the next request still
    /// arrives whole. Cut at the link's largest write, some are not: the device then
    /// collects garbage that swallows what comes next.
    @Test func aWriteMistakenForTheStartOfARequestIsDroppedAtOnce() async {
        var random = seededGenerator("harmless starts")
        let shape = SMPWriteShape(payload: Self.payload, bufferSize: Self.bufferSize)
        let probe = SMPPacket(.write, command: .echo, sequence: 9, body: .textMap(["d": .text("probe")])).encode()
        var harmfulPlainCuts = 0
        var device = Self.device()
        for request in 0..<100 {
            let bytes = Self.uploadRequest(offset: request * 2400, data: Self.randomBytes(2400, using: &random), sequence: UInt8(request % 256))
            for (cut, label) in [(shape.writes(of: bytes), "shaped"), (Self.cutPlainly(bytes), "plain")] {
                for write in cut.dropFirst() {
                    _ = await device.collect(Array(bytes[write]))
                    let swallowed = await device.collect(probe) != probe
                    if swallowed { device = Self.device() }  // it may still hold part of the garbage
                    if label == "shaped" {
                        #expect(!swallowed, "request \(request): the write at \(write.lowerBound) started a request the device could hold")
                    } else if swallowed {
                        harmfulPlainCuts += 1
                    }
                }
            }
        }
        #expect(harmfulPlainCuts > 0, "cut plainly, some writes do start a request of garbage (about one in thirty)")
    }

    /// A write lost in the middle of a request, and the next request's first write
    /// fills the hole exactly: the device completes a request glued from two.
    /// With `off` last it ends in bytes that are not `off`: refused, nothing
    /// written. With `off` first (as bleota encoded it before) the device wrote the
    /// shifted bytes at the right offset.
    @Test(arguments: [false, true])
    func aRequestGluedFromALostWritesRemainsIsRefusedNotWritten(offsetFirst: Bool) async throws {
        var random = seededGenerator("glued request \(offsetFirst)")
        let image = MCUbootImage.build(firmware: Self.randomBytes(20_000, using: &random), version: .init(major: 2, minor: 0, revision: 0, build: 0))
        let device = Self.device()
        let environment = DeviceEnvironment(clock: SystemClock()) { _ in }
        let shape = SMPWriteShape(payload: Self.payload, bufferSize: Self.bufferSize)
        let start = SMPPacket(
            .write, command: .imageUpload, sequence: 0,
            body: SMPUploadRequest(
                offset: 0, data: Array(image[0..<1000]), length: image.count,
                sha: SHA256Digest.hash(image), upgrade: false
            ).body
        ).encode()
        for write in shape.writes(of: start) {
            if let message = await device.collect(Array(start[write])) { _ = await device.respond(to: message, environment: environment) }
        }
        let started = device.storage.withUpload { upload in upload.map(\.bytes.count) }
        #expect(started == 1000)
        let a = Self.uploadRequest(offset: 1000, data: Array(image[1000..<3000]), sequence: 1, offsetFirst: offsetFirst)
        let b = Self.uploadRequest(offset: 3000, data: Array(image[3000..<5000]), sequence: 2, offsetFirst: offsetFirst)
        let aWrites = shape.writes(of: a), bFirst = try #require(shape.writes(of: b).first)
        // The lost write: one in the middle as long as b's first write, so that b's first fills the hole.
        let lost = try #require(aWrites.indices.dropFirst().dropLast().first { aWrites[$0].count == bFirst.count })
        for index in aWrites.indices where index != lost {
            #expect(await device.collect(Array(a[aWrites[index]])) == nil)
        }
        let glued = try #require(await device.collect(Array(b[bFirst])), "b's first write completes the partial request")
        #expect(glued.count == a.count)
        let answer = await device.respond(to: glued, environment: environment)?.0
        let held = device.storage.withUpload { upload in upload.map(\.bytes) } ?? []
        if offsetFirst {
            #expect(held.count == 3000 && held != Array(image[0..<3000]), "off first: the glued request was written, shifted")
        } else {
            #expect(answer.map { $0.body["rc"] != nil } ?? true, "refused or dropped: \(String(describing: answer?.body))")
            #expect(held == Array(image[0..<1000]), "off last: nothing written")
        }
    }
}
