import BleotaCodec
import BleotaLink
import BleotaSystem
import CBlueZ
import Glibc

/// HCI commands and events as bytes (Core v5.4, Vol 4, Part E, §5.4 and §7),
/// only as many as connection control needs. Pure values so the exchange with
/// a controller can be tested against scripted bytes.
public struct HCICommand: Sendable, Equatable {
    public var opcode: UInt16
    public var parameters: [UInt8]

    public init(ogf: UInt16, ocf: UInt16, parameters: [UInt8] = []) {
        opcode = ogf << 10 | ocf
        self.parameters = parameters
    }

    /// `[0x01][opcode LE][length][parameters]`, as written to a raw HCI socket.
    public func encode() -> [UInt8] {
        var writer = ByteWriter(capacity: 4 + parameters.count)
        writer.write(UInt8(0x01))
        writer.write(opcode)
        writer.write(UInt8(parameters.count))
        writer.write(contentsOf: parameters)
        return writer.bytes
    }

    static let leOGF: UInt16 = 0x08
    static let linkControlOGF: UInt16 = 0x01

    /// Disconnect (Core Vol 4, Part E, §7.1.6): ends the connection `handle` with `reason`
    /// (0x13, Remote User Terminated Connection, as a host that is done with it says).
    public static func disconnect(handle: UInt16, reason: UInt8 = 0x13) -> HCICommand {
        var writer = ByteWriter(capacity: 3)
        writer.write(handle)
        writer.write(reason)
        return HCICommand(ogf: linkControlOGF, ocf: 0x0006, parameters: writer.bytes)
    }

    public static let leReadLocalSupportedFeatures = HCICommand(ogf: leOGF, ocf: 0x0003)

    /// LE Connection Update (§7.8.18); intervals in 1.25 ms units, timeout in 10 ms units.
    public static func leConnectionUpdate(
        handle: UInt16, interval: ClosedRange<UInt16>, latency: UInt16,
        supervisionTimeout: UInt16
    ) -> HCICommand {
        var writer = ByteWriter(capacity: 14)
        writer.write(handle)
        writer.write(interval.lowerBound)
        writer.write(interval.upperBound)
        writer.write(latency)
        writer.write(supervisionTimeout)
        writer.write(UInt16(0))  // minimum connection event length: no preference
        writer.write(UInt16(0))  // maximum
        return HCICommand(ogf: leOGF, ocf: 0x0013, parameters: writer.bytes)
    }

    /// LE Read PHY (§7.8.47).
    public static func leReadPHY(handle: UInt16) -> HCICommand {
        var writer = ByteWriter()
        writer.write(handle)
        return HCICommand(ogf: leOGF, ocf: 0x0030, parameters: writer.bytes)
    }

    /// LE Set PHY (§7.8.49): the same preference for both directions, no coding preference.
    public static func leSetPHY(handle: UInt16, phy: LEPHY) -> HCICommand {
        var writer = ByteWriter()
        writer.write(handle)
        writer.write(UInt8(0x00))  // ALL_PHYS: we state a preference for both directions
        writer.write(phy.preferenceBit)
        writer.write(phy.preferenceBit)
        writer.write(UInt16(0))
        return HCICommand(ogf: leOGF, ocf: 0x0032, parameters: writer.bytes)
    }
}

/// An HCI event packet, with the three kinds connection control waits for decoded.
public enum HCIEvent: Sendable, Equatable {
    case commandComplete(opcode: UInt16, returnParameters: [UInt8])
    case commandStatus(status: UInt8, opcode: UInt16)
    case leMeta(subevent: UInt8, parameters: [UInt8])
    case other(code: UInt8, parameters: [UInt8])

    /// Decodes `[0x04][event code][length][parameters]`; bad bytes are a typed error, never a crash.
    public init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        let type = try reader.readUInt8("packet type")
        guard type == 0x04 else { throw reader.invalid("packet type", "0x\(String(type, radix: 16)) is not an HCI event", at: 0) }
        let code = try reader.readUInt8("event code")
        let length = Int(try reader.readUInt8("parameter length"))
        var parameters = ByteReader(try reader.readBytes(length, "event parameters"))
        switch code {
        case 0x0E:
            _ = try parameters.readUInt8("number of HCI command packets")
            let opcode = try parameters.readUInt16(.little, "command opcode")
            self = .commandComplete(opcode: opcode, returnParameters: parameters.readRemaining())
        case 0x0F:
            let status = try parameters.readUInt8("status")
            _ = try parameters.readUInt8("number of HCI command packets")
            let opcode = try parameters.readUInt16(.little, "command opcode")
            self = .commandStatus(status: status, opcode: opcode)
        case 0x3E:
            let subevent = try parameters.readUInt8("LE subevent")
            self = .leMeta(subevent: subevent, parameters: parameters.readRemaining())
        default:
            self = .other(code: code, parameters: parameters.readRemaining())
        }
    }
}

/// The LE PHYs (Core v5.4, Vol 6, Part A, §2).
public enum LEPHY: String, Sendable, Hashable, CaseIterable, Codable {
    case le1M = "1m"
    case le2M = "2m"
    case coded

    /// The bit for this PHY in LE Set PHY's TX_PHYS/RX_PHYS.
    var preferenceBit: UInt8 {
        switch self {
        case .le1M: 0x01
        case .le2M: 0x02
        case .coded: 0x04
        }
    }

    /// The value LE Read PHY and LE PHY Update Complete use.
    init?(reported value: UInt8) {
        switch value {
        case 1: self = .le1M
        case 2: self = .le2M
        case 3: self = .coded
        default: return nil
        }
    }

    /// The LE feature bit a controller sets when it supports this PHY (Vol 6, Part B, §4.6).
    var featureBit: Int? {
        switch self {
        case .le1M: nil
        case .le2M: 8
        case .coded: 11
        }
    }

    public var displayName: String {
        switch self {
        case .le1M: "1M"
        case .le2M: "2M"
        case .coded: "Coded"
        }
    }
}

/// HCI error codes (Core v5.4, Vol 1, Part F) named, for messages people can act on.
public func hciStatusDescription(_ status: UInt8) -> String {
    let name: String
    switch status {
    case 0x01: name = "unknown HCI command"
    case 0x02: name = "unknown connection identifier"
    case 0x0C: name = "command disallowed"
    case 0x11: name = "unsupported feature or parameter value"
    case 0x12: name = "invalid HCI command parameters"
    case 0x1A: name = "unsupported remote feature"
    case 0x1E: name = "invalid LL parameters"
    case 0x1F: name = "unspecified error"
    case 0x20: name = "unsupported LL parameter value"
    case 0x22: name = "LL response timeout"
    case 0x23: name = "LL procedure collision"
    case 0x2A: name = "different transaction collision"
    case 0x3B: name = "unacceptable connection parameters"
    default: name = "error"
    }
    return "HCI status 0x" + (status < 0x10 ? "0" : "") + String(status, radix: 16) + ": " + name
}

public struct HCIError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Where HCI packets go and come from: a raw HCI socket, or a script in tests.
public protocol HCITransport: AnyObject {
    func write(_ packet: [UInt8]) throws(HCIError)
    /// The next event packet, or nil when `timeout` passes first.
    func read(timeout: Duration) async throws(HCIError) -> [UInt8]?
}

/// A raw HCI socket on one adapter that sees command results and LE meta events.
/// Sending commands on it needs `CAP_NET_RAW`.
public final class RawHCISocket: HCITransport {
    let dd: Int32

    public init(adapter: String?) throws(HCIError) {
        let deviceID = BluetoothAvailability.deviceID(adapter) ?? -1
        guard deviceID >= 0 else { throw HCIError(BluetoothAvailability.noAdapter(adapter).description) }
        dd = hci_open_dev(deviceID)
        guard dd >= 0 else { throw HCIError("cannot open \(adapter ?? "the adapter") for HCI commands: \(String(cString: strerror(errno)))") }
        var filter = hci_filter()
        filter.type_mask = 1 << UInt32(HCI_EVENT_PKT)
        withUnsafeMutableBytes(of: &filter.event_mask) { raw in
            let words = raw.bindMemory(to: UInt32.self)
            for event in [UInt32(0x0E), 0x0F, 0x3E] { words[Int(event >> 5)] |= 1 << (event & 31) }
        }
        setsockopt(dd, SOL_HCI, HCI_FILTER, &filter, socklen_t(MemoryLayout<hci_filter>.size))
        // Reads wait on the reactor, like every other descriptor, never in poll(2) on a task's thread.
        _ = fcntl(dd, F_SETFL, fcntl(dd, F_GETFL) | O_NONBLOCK)
    }

    deinit {
        DescriptorReactor.shared.forget(dd)
        hci_close_dev(dd)
    }

    public func write(_ packet: [UInt8]) throws(HCIError) {
        let written = packet.withUnsafeBytes { Glibc.write(dd, $0.baseAddress, $0.count) }
        guard written == packet.count else {
            let code = errno
            if code == EPERM || code == EACCES {
                throw HCIError("HCI commands need CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` on bleota")
            }
            throw HCIError("cannot send an HCI command: \(String(cString: strerror(code)))")
        }
    }

    public func read(timeout: Duration) async throws(HCIError) -> [UInt8]? {
        let deadline = ContinuousClock.now + timeout
        while true {
            var buffer = [UInt8](repeating: 0, count: 260)
            let count = buffer.withUnsafeMutableBytes { Glibc.read(dd, $0.baseAddress, $0.count) }
            if count > 0 { return Array(buffer[..<count]) }
            let code = errno
            guard count < 0, code == EAGAIN || code == EWOULDBLOCK || code == EINTR else {
                throw HCIError("reading from the controller failed: \(String(cString: strerror(count == 0 ? EIO : code)))")
            }
            let remaining = deadline - .now
            guard remaining > .zero, await Self.readable(dd, within: remaining) else { return nil }
        }
    }

    /// Whether `descriptor` became readable (or has an error for the next read to report)
    /// within `limit`: the reactor's wait, cancelled when the time runs out.
    static func readable(_ descriptor: Int32, within limit: Duration) async -> Bool {
        (try? await withDeadline(limit, clock: SystemClock()) {
            try await DescriptorReactor.shared.wait(descriptor, writable: false)
            return true
        }) ?? false
    }
}
