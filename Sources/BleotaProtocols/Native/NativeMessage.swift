import BleotaCodec
import BleotaEngine

/// bleota's own OTA protocol, version 1: every message on the wire.
///
/// The byte layouts, with worked examples, are in `protocols/bleota.md`; this
/// file is their one implementation, shared by the host half (``NativeUpdater``)
/// and the device half (``NativeDevice``). A packet is one opcode byte followed
/// by its body, all integers little-endian like the ATT layer it usually rides
/// on. Every message ends with a CRC-16/CCITT-FALSE of everything before it, so
/// a damaged packet of any kind is dropped rather than believed. Requests are
/// `0x01…0x0F`, their responses set the top bit (`request | 0x80`), transfer
/// messages `0x10…0x13` flow in either direction (host → device for
/// `flash`/`push`, device → host for `pull`), `0x14` carries a segment of a
/// message too long for the link (see ``NativeFraming``), and `0xFF` is an
/// error reply to anything the receiver could not accept.
package enum NativeMessage: Sendable, Hashable, WireCodable {
    case hello(Hello)
    case helloResponse(HelloResponse)
    case enterBootloader
    case start(Start)
    case startResponse(RangesResponse)
    case status(sha256: [UInt8])
    case statusResponse(RangesResponse)
    case verify
    case verifyResponse(VerifyResult)
    case activate
    case reboot
    case abort
    case getFile(GetFile)
    case getFileResponse(FileInfo)
    /// A bare `{status}` answer to `enterBootloader`, `activate`, `reboot` or `abort`.
    case simpleResponse(request: Opcode, status: NativeStatus)
    case data(DataPacket)
    case ack(Acknowledgement)
    case nack(NegativeAcknowledgement)
    case ackRequest
    case segment(Segment)
    /// From now on the receiver acknowledges every this many new packets
    /// (sender → receiver, to a device with ``Capabilities/ackIntervalChange``).
    case ackInterval(UInt16)
    case error(ErrorReply)

    package enum Opcode: UInt8, Sendable, Hashable, CaseIterable {
        case hello = 0x01, enterBootloader = 0x02, start = 0x03, status = 0x04, verify = 0x05
        case activate = 0x06, reboot = 0x07, abort = 0x08, getFile = 0x09
        case data = 0x10, ack = 0x11, nack = 0x12, ackRequest = 0x13, segment = 0x14, ackInterval = 0x15
        case error = 0xFF

        package var responseCode: UInt8 { rawValue | 0x80 }
        package var name: String { String(describing: self) }
    }

    /// The highest protocol version this implementation speaks.
    package static let version: UInt8 = 1
    /// Bytes a data packet spends besides its payload: opcode, sequence number, CRC-16.
    package static let dataHeaderSize = 5
    /// A compact DATA packet: one byte, `0x20 + sequence mod 96`, then the payload.
    ///
    /// On a 23-byte ATT MTU a write carries 20 bytes, and the full DATA header
    /// (opcode, 16-bit sequence, CRC-16) takes 5 of them. A compact packet takes
    /// 1, raising the payload share from 75 % to 95 %. Its first byte lies in
    /// 0x20…0x7F, where no opcode is, so it cannot be mistaken for a message.
    /// It gives up the per-packet CRC-16: on BLE each link-layer packet carries
    /// its own CRC-24, and the image's CRC-32 and SHA-256 are checked at VERIFY
    /// (a host whose compact transfer fails VERIFY sends it again with full
    /// headers). The sequence number is the packet index modulo 96, so the
    /// sender keeps every packet it sends within ``spanLimit`` of the receiver's
    /// cumulative point, and the receiver unwraps it against its own.
    package enum CompactData {
        package static let firstByte: UInt8 = 0x20
        package static let modulus = 96
        package static let headerSize = 1
        /// Packets the sender may have beyond the receiver's cumulative point:
        /// under half the modulus, so every one unwraps to itself.
        package static let spanLimit = 40

        package static func isCompactData(_ packet: [UInt8]) -> Bool {
            guard let first = packet.first else { return false }
            return first >= firstByte && Int(first) < Int(firstByte) + modulus
        }

        package static func encode(index: Int, payload: ArraySlice<UInt8>) -> [UInt8] {
            var packet = [UInt8]()
            packet.reserveCapacity(payload.count + headerSize)
            packet.append(firstByte + UInt8(index % modulus))
            packet.append(contentsOf: payload)
            return packet
        }

        /// The absolute packet index of a compact packet, nearest `reference`.
        package static func index(of packet: [UInt8], near reference: Int) -> Int? {
            guard isCompactData(packet) else { return nil }
            return SequenceNumber.unwrap(Int(packet[0] - firstByte), modulus: modulus, near: reference)
        }
    }

    /// The field name a checksum failure is reported under.
    package static let checksumField = "crc16"

    package init(decoding outer: inout ByteReader) throws(DecodingError) {
        let start = outer.offset
        let all = outer.readRemaining()
        guard all.count >= 3 else {
            throw DecodingError(field: all.isEmpty ? "opcode" : Self.checksumField, offset: start, reason: .truncated(needed: 3 - all.count))
        }
        let body = Array(all.dropLast(2))
        let carried = UInt16(all[all.count - 2]) | UInt16(all[all.count - 1]) << 8
        let computed = CRC16.checksum(body, variant: .ccittFalse)
        guard carried == computed else {
            throw DecodingError(
                field: Self.checksumField, offset: start + body.count,
                reason: .invalidValue("checksum mismatch: carried 0x\(String(carried, radix: 16)), computed 0x\(String(computed, radix: 16))"))
        }
        var reader = ByteReader(body)
        try self.init(body: &reader)
        try reader.expectEnd(Opcode(rawValue: body[0]).map { "\($0.name) message" } ?? "message")
    }

    private init(body reader: inout ByteReader) throws(DecodingError) {
        let code = try reader.readUInt8("opcode")
        switch code {
        case Opcode.hello.rawValue:
            self = .hello(
                Hello(
                    minimumVersion: try reader.readUInt8("hello.minimumVersion"),
                    maximumVersion: try reader.readUInt8("hello.maximumVersion")))
        case Opcode.hello.responseCode: self = .helloResponse(try HelloResponse(decoding: &reader))
        case Opcode.enterBootloader.rawValue: self = .enterBootloader
        case Opcode.start.rawValue: self = .start(try Start(decoding: &reader))
        case Opcode.start.responseCode: self = .startResponse(try RangesResponse(decoding: &reader))
        case Opcode.status.rawValue: self = .status(sha256: try reader.readBytes(32, "status.sha256"))
        case Opcode.status.responseCode: self = .statusResponse(try RangesResponse(decoding: &reader))
        case Opcode.verify.rawValue: self = .verify
        case Opcode.verify.responseCode: self = .verifyResponse(try VerifyResult(decoding: &reader))
        case Opcode.activate.rawValue: self = .activate
        case Opcode.reboot.rawValue: self = .reboot
        case Opcode.abort.rawValue: self = .abort
        case Opcode.getFile.rawValue: self = .getFile(try GetFile(decoding: &reader))
        case Opcode.getFile.responseCode: self = .getFileResponse(try FileInfo(decoding: &reader))
        case Opcode.enterBootloader.responseCode, Opcode.activate.responseCode,
            Opcode.reboot.responseCode, Opcode.abort.responseCode:
            let request = Opcode(rawValue: code & 0x7F)!
            self = .simpleResponse(request: request, status: try NativeStatus(decoding: &reader))
        case Opcode.data.rawValue: self = .data(try DataPacket(decoding: &reader))
        case Opcode.ack.rawValue: self = .ack(try Acknowledgement(decoding: &reader))
        case Opcode.nack.rawValue: self = .nack(try NegativeAcknowledgement(decoding: &reader))
        case Opcode.ackRequest.rawValue: self = .ackRequest
        case Opcode.segment.rawValue: self = .segment(try Segment(decoding: &reader))
        case Opcode.ackInterval.rawValue:
            let at = reader.offset
            let interval = try reader.readUInt16(.little, "ackInterval.interval")
            guard interval > 0 else { throw reader.invalid("ackInterval.interval", "must be at least 1", at: at) }
            self = .ackInterval(interval)
        case Opcode.error.rawValue: self = .error(try ErrorReply(decoding: &reader))
        default:
            throw DecodingError(field: "opcode", offset: 0, reason: .invalidValue("unknown opcode 0x\([code].hexString)"))
        }
    }

    package func encode(into writer: inout ByteWriter) {
        var body = ByteWriter()
        encodeBody(into: &body)
        writer.write(contentsOf: body.bytes)
        writer.write(CRC16.checksum(body.bytes, variant: .ccittFalse))
    }

    private func encodeBody(into writer: inout ByteWriter) {
        switch self {
        case .hello(let hello):
            writer.write(Opcode.hello.rawValue)
            writer.write(hello.minimumVersion)
            writer.write(hello.maximumVersion)
        case .helloResponse(let body):
            writer.write(Opcode.hello.responseCode)
            body.encode(into: &writer)
        case .enterBootloader: writer.write(Opcode.enterBootloader.rawValue)
        case .start(let body):
            writer.write(Opcode.start.rawValue)
            body.encode(into: &writer)
        case .startResponse(let body):
            writer.write(Opcode.start.responseCode)
            body.encode(into: &writer)
        case .status(let sha):
            writer.write(Opcode.status.rawValue)
            writer.write(contentsOf: Self.fixed(sha, 32))
        case .statusResponse(let body):
            writer.write(Opcode.status.responseCode)
            body.encode(into: &writer)
        case .verify: writer.write(Opcode.verify.rawValue)
        case .verifyResponse(let body):
            writer.write(Opcode.verify.responseCode)
            body.encode(into: &writer)
        case .activate: writer.write(Opcode.activate.rawValue)
        case .reboot: writer.write(Opcode.reboot.rawValue)
        case .abort: writer.write(Opcode.abort.rawValue)
        case .getFile(let body):
            writer.write(Opcode.getFile.rawValue)
            body.encode(into: &writer)
        case .getFileResponse(let body):
            writer.write(Opcode.getFile.responseCode)
            body.encode(into: &writer)
        case .simpleResponse(let request, let status):
            writer.write(request.responseCode)
            status.encode(into: &writer)
        case .data(let body):
            writer.write(Opcode.data.rawValue)
            body.encode(into: &writer)
        case .ack(let body):
            writer.write(Opcode.ack.rawValue)
            body.encode(into: &writer)
        case .nack(let body):
            writer.write(Opcode.nack.rawValue)
            body.encode(into: &writer)
        case .ackRequest: writer.write(Opcode.ackRequest.rawValue)
        case .segment(let body):
            writer.write(Opcode.segment.rawValue)
            body.encode(into: &writer)
        case .ackInterval(let interval):
            writer.write(Opcode.ackInterval.rawValue)
            writer.write(interval)
        case .error(let body):
            writer.write(Opcode.error.rawValue)
            body.encode(into: &writer)
        }
    }

    /// Pads or cuts to `count` bytes, so a caller's wrong-length hash can never
    /// produce a packet the peer misparses.
    static func fixed(_ bytes: [UInt8], _ count: Int) -> [UInt8] {
        bytes.count == count ? bytes : Array((bytes + [UInt8](repeating: 0, count: count)).prefix(count))
    }
}

/// A result code carried by responses and error replies.
package struct NativeStatus: RawRepresentable, Sendable, Hashable, WireCodable, CustomStringConvertible {
    package var rawValue: UInt8
    package init(rawValue: UInt8) { self.rawValue = rawValue }

    package static let ok = NativeStatus(rawValue: 0)
    package static let unsupportedVersion = NativeStatus(rawValue: 1)
    package static let invalidState = NativeStatus(rawValue: 2)
    package static let noSpace = NativeStatus(rawValue: 3)
    package static let badParameter = NativeStatus(rawValue: 4)
    package static let notFound = NativeStatus(rawValue: 5)
    package static let verifyFailed = NativeStatus(rawValue: 6)
    package static let busy = NativeStatus(rawValue: 7)
    package static let unknownOpcode = NativeStatus(rawValue: 8)
    package static let malformed = NativeStatus(rawValue: 9)
    /// A delta patch's base is not the image the device runs.
    package static let wrongBase = NativeStatus(rawValue: 10)

    package var description: String {
        switch self {
        case .ok: "ok"
        case .unsupportedVersion: "unsupported protocol version"
        case .invalidState: "not allowed in the device's current state"
        case .noSpace: "not enough space on the device"
        case .badParameter: "bad parameter"
        case .notFound: "not found"
        case .verifyFailed: "verification failed"
        case .busy: "device busy"
        case .unknownOpcode: "unknown request"
        case .malformed: "malformed request"
        case .wrongBase: "the patch's base is not the image the device runs"
        default: "status 0x\([rawValue].hexString)"
        }
    }

    package init(decoding reader: inout ByteReader) throws(DecodingError) {
        rawValue = try reader.readUInt8("status")
    }
    package func encode(into writer: inout ByteWriter) { writer.write(rawValue) }
}

extension ByteReader {
    /// A length-prefixed (u8) UTF-8 string.
    mutating func readString8(_ field: String) throws(DecodingError) -> String {
        let start = offset
        let length = Int(try readUInt8(field + ".length"))
        let bytes = try readBytes(length, field)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw invalid(field, "not valid UTF-8", at: start)
        }
        return text
    }
}

extension ByteWriter {
    /// Writes a u8-length-prefixed UTF-8 string, cut to 255 bytes at a character boundary.
    mutating func writeString8(_ text: String) {
        var bytes = Array(text.utf8)
        if bytes.count > 255 {
            var cut = String(text.prefix(255))
            while cut.utf8.count > 255 { cut.removeLast() }
            bytes = Array(cut.utf8)
        }
        write(UInt8(bytes.count))
        write(contentsOf: bytes)
    }
}

extension NativeMessage {
    package struct Hello: Sendable, Hashable {
        package var minimumVersion: UInt8
        package var maximumVersion: UInt8
        package init(minimumVersion: UInt8 = 1, maximumVersion: UInt8 = NativeMessage.version) {
            self.minimumVersion = minimumVersion
            self.maximumVersion = maximumVersion
        }
    }

    /// Whether the device runs its application or its bootloader.
    package enum DeviceMode: UInt8, Sendable, Hashable, Codable {
        case application = 0
        case bootloader = 1
    }

    /// What the device can do; bits of one byte so old hosts ignore new bits.
    package struct Capabilities: OptionSet, Sendable, Hashable {
        package var rawValue: UInt8
        package init(rawValue: UInt8) { self.rawValue = rawValue }
        /// Accepts raw-deflate-compressed streams (START flag bit 0).
        package static let deflate = Capabilities(rawValue: 1 << 0)
        /// Accepts test transfers (target 2): checked and discarded, for `bleota tune`.
        package static let testTransfer = Capabilities(rawValue: 1 << 1)
        /// Has a file store for `push`/`pull`.
        package static let files = Capabilities(rawValue: 1 << 2)
        /// Keeps the ranges of an interrupted upload for a later START with the same hash.
        package static let resume = Capabilities(rawValue: 1 << 3)
        /// Takes compact DATA packets (START flag bit 1, see ``NativeMessage/CompactData``).
        package static let compactData = Capabilities(rawValue: 1 << 4)
        /// Takes ACK_INTERVAL during a transfer: the sender may ask for
        /// acknowledgements less often once it knows the link, not the device,
        /// sets the pace (see ``NativeMessage/ackInterval(_:)``).
        package static let ackIntervalChange = Capabilities(rawValue: 1 << 5)
        /// Applies delta patches (START flag bit 2, protocols/delta.md) against the image it runs, and
        /// names that image's SHA-256 at the end of HELLO's answer so a host can tell whether it holds
        /// the patch's base.
        package static let delta = Capabilities(rawValue: 1 << 6)
    }

    package struct HelloResponse: Sendable, Hashable, WireCodable {
        /// The version both sides will speak (the highest in both ranges).
        package var version: UInt8
        package var mode: DeviceMode
        package var capabilities: Capabilities
        /// The largest data packet (whole message, header included) the device accepts.
        package var maximumPacket: UInt16
        /// How many packets the device can queue before it drops; windows above it cost resends.
        package var bufferCount: UInt16
        /// Bytes available for an image (the staging slot).
        package var slotSize: UInt32
        package var firmwareVersion: String
        package var name: String
        /// The SHA-256 of the image the device runs: sent (after `name`) when it applies delta patches.
        package var runningSHA256: [UInt8]?

        package init(
            version: UInt8, mode: DeviceMode, capabilities: Capabilities, maximumPacket: UInt16,
            bufferCount: UInt16, slotSize: UInt32, firmwareVersion: String, name: String, runningSHA256: [UInt8]? = nil
        ) {
            self.version = version
            self.mode = mode
            self.capabilities = capabilities
            self.maximumPacket = maximumPacket
            self.bufferCount = bufferCount
            self.slotSize = slotSize
            self.firmwareVersion = firmwareVersion
            self.name = name
            self.runningSHA256 = capabilities.contains(.delta) ? NativeMessage.fixed(runningSHA256 ?? [], 32) : nil
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            version = try reader.readUInt8("hello.version")
            let modeOffset = reader.offset
            let rawMode = try reader.readUInt8("hello.mode")
            guard let mode = DeviceMode(rawValue: rawMode) else {
                throw reader.invalid("hello.mode", "unknown mode \(rawMode)", at: modeOffset)
            }
            self.mode = mode
            capabilities = Capabilities(rawValue: try reader.readUInt8("hello.capabilities"))
            maximumPacket = try reader.readUInt16(.little, "hello.maximumPacket")
            bufferCount = try reader.readUInt16(.little, "hello.bufferCount")
            slotSize = try reader.readUInt32(.little, "hello.slotSize")
            firmwareVersion = try reader.readString8("hello.firmwareVersion")
            name = try reader.readString8("hello.name")
            runningSHA256 = capabilities.contains(.delta) ? try reader.readBytes(32, "hello.runningSHA256") : nil
        }

        package func encode(into writer: inout ByteWriter) {
            writer.write(version)
            writer.write(mode.rawValue)
            writer.write(capabilities.rawValue)
            writer.write(maximumPacket)
            writer.write(bufferCount)
            writer.write(slotSize)
            writer.writeString8(firmwareVersion)
            writer.writeString8(name)
            if capabilities.contains(.delta) { writer.write(contentsOf: NativeMessage.fixed(runningSHA256 ?? [], 32)) }
        }
    }

    /// What a transfer writes to.
    package enum Target: UInt8, Sendable, Hashable, Codable {
        /// The staging slot; activated only after VERIFY succeeds.
        case firmware = 0
        /// A named file in the device's file store.
        case file = 1
        /// Checked and discarded (for tuning trials): never touches firmware.
        case test = 2
    }

    package struct Start: Sendable, Hashable, WireCodable {
        package var target: Target
        /// Bit 0: the stream is raw deflate of the image.
        package var compressed: Bool
        /// Bit 1: data packets are compact (``NativeMessage/CompactData``).
        package var compact: Bool
        /// Bit 2: the stream is a delta patch (protocols/delta.md) against the image with this SHA-256,
        /// which the device must be running; sent after `label`.
        package var deltaBaseSHA256: [UInt8]?
        /// Size of the image (after inflating).
        package var imageSize: UInt32
        /// Size of the bytes sent (the compressed stream, or the image).
        package var streamSize: UInt32
        /// CRC-32/ISO-HDLC of the image.
        package var crc32: UInt32
        /// SHA-256 of the image: also the key under which a device keeps a partial upload.
        package var sha256: [UInt8]
        /// Payload bytes per data packet; packet `n` carries stream bytes `n*packetSize ..< (n+1)*packetSize`.
        package var packetSize: UInt16
        /// The device sends an ACK after this many packets.
        package var ackInterval: UInt16
        /// The version label the device reports once the image runs (firmware), or the file name (file).
        package var label: String

        package init(
            target: Target, compressed: Bool, compact: Bool = false, imageSize: UInt32, streamSize: UInt32, crc32: UInt32,
            sha256: [UInt8], packetSize: UInt16, ackInterval: UInt16, label: String, deltaBaseSHA256: [UInt8]? = nil
        ) {
            self.target = target
            self.compressed = compressed
            self.compact = compact
            self.deltaBaseSHA256 = deltaBaseSHA256.map { NativeMessage.fixed($0, 32) }
            self.imageSize = imageSize
            self.streamSize = streamSize
            self.crc32 = crc32
            self.sha256 = NativeMessage.fixed(sha256, 32)
            self.packetSize = packetSize
            self.ackInterval = ackInterval
            self.label = label
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            let targetOffset = reader.offset
            let rawTarget = try reader.readUInt8("start.target")
            guard let target = Target(rawValue: rawTarget) else {
                throw reader.invalid("start.target", "unknown target \(rawTarget)", at: targetOffset)
            }
            self.target = target
            let flagsOffset = reader.offset
            let flags = try reader.readUInt8("start.flags")
            guard flags & ~7 == 0 else { throw reader.invalid("start.flags", "unknown flag bits 0x\([flags].hexString)", at: flagsOffset) }
            guard flags & 5 != 5 else { throw reader.invalid("start.flags", "a stream is deflated or a delta patch, not both", at: flagsOffset) }
            compressed = flags & 1 != 0
            compact = flags & 2 != 0
            imageSize = try reader.readUInt32(.little, "start.imageSize")
            streamSize = try reader.readUInt32(.little, "start.streamSize")
            crc32 = try reader.readUInt32(.little, "start.crc32")
            sha256 = try reader.readBytes(32, "start.sha256")
            let sizeOffset = reader.offset
            packetSize = try reader.readUInt16(.little, "start.packetSize")
            guard packetSize > 0 else { throw reader.invalid("start.packetSize", "must be at least 1", at: sizeOffset) }
            let intervalOffset = reader.offset
            ackInterval = try reader.readUInt16(.little, "start.ackInterval")
            guard ackInterval > 0 else { throw reader.invalid("start.ackInterval", "must be at least 1", at: intervalOffset) }
            label = try reader.readString8("start.label")
            deltaBaseSHA256 = flags & 4 != 0 ? try reader.readBytes(32, "start.deltaBaseSHA256") : nil
        }

        package func encode(into writer: inout ByteWriter) {
            writer.write(target.rawValue)
            writer.write(UInt8((compressed ? 1 : 0) | (compact ? 2 : 0) | (deltaBaseSHA256 != nil ? 4 : 0)))
            writer.write(imageSize)
            writer.write(streamSize)
            writer.write(crc32)
            writer.write(contentsOf: NativeMessage.fixed(sha256, 32))
            writer.write(packetSize)
            writer.write(ackInterval)
            writer.writeString8(label)
            if let deltaBaseSHA256 { writer.write(contentsOf: NativeMessage.fixed(deltaBaseSHA256, 32)) }
        }
    }

    /// A status and the byte ranges of the stream the device already holds
    /// (answers START and STATUS; what makes resume resend only what is missing).
    package struct RangesResponse: Sendable, Hashable, WireCodable {
        package var status: NativeStatus
        package var ranges: [Range<UInt32>]

        package init(status: NativeStatus, ranges: [Range<UInt32>] = []) {
            self.status = status
            self.ranges = Array(ranges.prefix(255))
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            status = try NativeStatus(decoding: &reader)
            let count = Int(try reader.readUInt8("ranges.count"))
            var ranges: [Range<UInt32>] = []
            for index in 0..<count {
                let at = reader.offset
                let start = try reader.readUInt32(.little, "ranges[\(index)].start")
                let end = try reader.readUInt32(.little, "ranges[\(index)].end")
                guard start <= end else { throw reader.invalid("ranges[\(index)]", "start \(start) is after end \(end)", at: at) }
                ranges.append(start..<end)
            }
            self.ranges = ranges
        }

        package func encode(into writer: inout ByteWriter) {
            status.encode(into: &writer)
            // The fields are public and mutable: cut here too, as the initialiser does,
            // so a long list can never overflow the count byte.
            let ranges = self.ranges.prefix(255)
            writer.write(UInt8(ranges.count))
            for range in ranges {
                writer.write(range.lowerBound)
                writer.write(range.upperBound)
            }
        }
    }

    package struct VerifyResult: Sendable, Hashable, WireCodable {
        package var status: NativeStatus
        /// What the device computed over what it holds, so a mismatch can be reported with both values.
        package var crc32: UInt32
        package var sha256: [UInt8]

        package init(status: NativeStatus, crc32: UInt32, sha256: [UInt8]) {
            self.status = status
            self.crc32 = crc32
            self.sha256 = NativeMessage.fixed(sha256, 32)
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            status = try NativeStatus(decoding: &reader)
            crc32 = try reader.readUInt32(.little, "verify.crc32")
            sha256 = try reader.readBytes(32, "verify.sha256")
        }

        package func encode(into writer: inout ByteWriter) {
            status.encode(into: &writer)
            writer.write(crc32)
            writer.write(contentsOf: NativeMessage.fixed(sha256, 32))
        }
    }

    package struct GetFile: Sendable, Hashable, WireCodable {
        package var name: String
        package var packetSize: UInt16
        package var ackInterval: UInt16
        package var window: UInt16

        package init(name: String, packetSize: UInt16, ackInterval: UInt16, window: UInt16) {
            self.name = name
            self.packetSize = packetSize
            self.ackInterval = ackInterval
            self.window = window
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            name = try reader.readString8("getFile.name")
            let at = reader.offset
            packetSize = try reader.readUInt16(.little, "getFile.packetSize")
            guard packetSize > 0 else { throw reader.invalid("getFile.packetSize", "must be at least 1", at: at) }
            // Zero is refused like START's: silently turning it into 1 would not survive a round trip.
            let intervalAt = reader.offset
            ackInterval = try reader.readUInt16(.little, "getFile.ackInterval")
            guard ackInterval > 0 else { throw reader.invalid("getFile.ackInterval", "must be at least 1", at: intervalAt) }
            let windowAt = reader.offset
            window = try reader.readUInt16(.little, "getFile.window")
            guard window > 0 else { throw reader.invalid("getFile.window", "must be at least 1", at: windowAt) }
        }

        package func encode(into writer: inout ByteWriter) {
            writer.writeString8(name)
            writer.write(packetSize)
            writer.write(ackInterval)
            writer.write(window)
        }
    }

    package struct FileInfo: Sendable, Hashable, WireCodable {
        package var status: NativeStatus
        package var size: UInt32
        package var crc32: UInt32
        package var sha256: [UInt8]

        package init(status: NativeStatus, size: UInt32, crc32: UInt32, sha256: [UInt8]) {
            self.status = status
            self.size = size
            self.crc32 = crc32
            self.sha256 = NativeMessage.fixed(sha256, 32)
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            status = try NativeStatus(decoding: &reader)
            size = try reader.readUInt32(.little, "file.size")
            crc32 = try reader.readUInt32(.little, "file.crc32")
            sha256 = try reader.readBytes(32, "file.sha256")
        }

        package func encode(into writer: inout ByteWriter) {
            status.encode(into: &writer)
            writer.write(size)
            writer.write(crc32)
            writer.write(contentsOf: NativeMessage.fixed(sha256, 32))
        }
    }

    /// One packet of the stream: its sequence number and payload (the message
    /// CRC covers both, so a damaged sequence number is caught too).
    package struct DataPacket: Sendable, Hashable, WireCodable {
        /// Packet index modulo 2¹⁶; receivers unwrap it against their window.
        package var sequence: UInt16
        package var payload: [UInt8]

        package init(sequence: UInt16, payload: [UInt8]) {
            self.sequence = sequence
            self.payload = payload
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            sequence = try reader.readUInt16(.little, "data.sequence")
            payload = reader.readRemaining()
        }

        package func encode(into writer: inout ByteWriter) {
            writer.write(sequence)
            writer.write(contentsOf: payload)
        }
    }

    /// Part `index` of `count` of a message too long for the link: the chunks,
    /// concatenated, are the whole message's bytes (its own CRC included).
    package struct Segment: Sendable, Hashable, WireCodable {
        package var index: UInt8
        package var count: UInt8
        package var chunk: [UInt8]

        package init(index: UInt8, count: UInt8, chunk: [UInt8]) {
            self.index = index
            self.count = count
            self.chunk = chunk
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            let at = reader.offset
            index = try reader.readUInt8("segment.index")
            count = try reader.readUInt8("segment.count")
            guard count >= 1, index < count else {
                throw reader.invalid("segment.index", "segment \(index) of \(count) is impossible", at: at)
            }
            chunk = reader.readRemaining()
        }

        package func encode(into writer: inout ByteWriter) {
            writer.write(index)
            writer.write(count)
            writer.write(contentsOf: chunk)
        }
    }

    /// Cumulative plus selective acknowledgement: every packet before
    /// `nextExpected` arrived, and bit `i` of `bitmap` (LSB of byte 0 first) says
    /// packet `nextExpected + 1 + i` arrived too.
    package struct Acknowledgement: Sendable, Hashable, WireCodable {
        package var nextExpected: UInt16
        package var bitmap: [UInt8]

        package init(nextExpected: UInt16, bitmap: [UInt8] = []) {
            self.nextExpected = nextExpected
            self.bitmap = Array(bitmap.prefix(32))
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            nextExpected = try reader.readUInt16(.little, "ack.nextExpected")
            let at = reader.offset
            let length = Int(try reader.readUInt8("ack.bitmapLength"))
            guard length <= 32 else { throw reader.invalid("ack.bitmapLength", "\(length) exceeds 32 bytes", at: at) }
            bitmap = try reader.readBytes(length, "ack.bitmap")
        }

        package func encode(into writer: inout ByteWriter) {
            writer.write(nextExpected)
            let bitmap = self.bitmap.prefix(32)
            writer.write(UInt8(bitmap.count))
            writer.write(contentsOf: bitmap)
        }

        /// Whether the bitmap reports packet `nextExpected + 1 + index` received.
        package func isSet(_ index: Int) -> Bool {
            guard index >= 0, index / 8 < bitmap.count else { return false }
            return bitmap[index / 8] & (1 << (index % 8)) != 0
        }
    }

    package enum NackReason: UInt8, Sendable, Hashable {
        /// Packets are missing: a later one arrived first.
        case gap = 1
        /// A packet arrived damaged (its CRC-16 did not match).
        case corrupt = 2
    }

    /// "Resend these now": `count` packets from `first` are missing.
    package struct NegativeAcknowledgement: Sendable, Hashable, WireCodable {
        package var first: UInt16
        package var count: UInt16
        package var reason: NackReason

        package init(first: UInt16, count: UInt16, reason: NackReason) {
            self.first = first
            self.count = count
            self.reason = reason
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            first = try reader.readUInt16(.little, "nack.first")
            count = try reader.readUInt16(.little, "nack.count")
            let at = reader.offset
            let raw = try reader.readUInt8("nack.reason")
            guard let reason = NackReason(rawValue: raw) else { throw reader.invalid("nack.reason", "unknown reason \(raw)", at: at) }
            self.reason = reason
        }

        package func encode(into writer: inout ByteWriter) {
            writer.write(first)
            writer.write(count)
            writer.write(reason.rawValue)
        }
    }

    /// The reply to a request the receiver could not carry out or parse.
    package struct ErrorReply: Sendable, Hashable, WireCodable {
        /// The opcode of the offending message (0 if it had none).
        package var request: UInt8
        package var status: NativeStatus
        /// Human-readable detail for logs and the CLI's error line.
        package var message: String

        package init(request: UInt8, status: NativeStatus, message: String) {
            self.request = request
            self.status = status
            self.message = message
        }

        package init(decoding reader: inout ByteReader) throws(DecodingError) {
            request = try reader.readUInt8("error.request")
            status = try NativeStatus(decoding: &reader)
            message = try reader.readString8("error.message")
        }

        package func encode(into writer: inout ByteWriter) {
            writer.write(request)
            status.encode(into: &writer)
            writer.writeString8(message)
        }
    }
}
