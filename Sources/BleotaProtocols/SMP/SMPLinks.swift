import BleotaCodec
import BleotaLink
import Logging

/// SMP over a serial line: each ``send(_:)`` is one whole SMP message, framed
/// into console lines (``SMPSerialFraming``); each ``receive()`` one whole
/// message rebuilt from them. Console output between frames is skipped.
public final class SMPSerialLink: Link {
    public let lines: SerialLineLink
    public let lineLength: Int
    public let parameters: LinkParameters
    private let logger: Logger

    public init(lines: SerialLineLink, lineLength: Int = 128, logger: Logger = Logger(label: "bleota.smp.serial")) {
        self.lines = lines
        self.lineLength = lineLength
        self.logger = logger
        parameters = LinkParameters(maximumPayload: 65_535, description: lines.parameters.description)
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        for line in SMPSerialFraming.encode(packet, lineLength: lineLength) {
            try await lines.send(line)
        }
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        var decoder = SMPSerialFraming.Decoder()
        while true {
            let line = try await lines.receive()
            do {
                if let message = try decoder.feed(line: line) { return message }
            } catch {
                // A damaged frame is dropped; the request it belonged to times out and is sent again.
                logger.debug("\(error)")
            }
        }
    }

    public func close() async { await lines.close() }
}

/// Where a `udp://HOST[:PORT]` or `serial:///dev/tty…[?baud=N]` address points.
public enum SMPNetworkAddress: Sendable, Equatable {
    case udp(host: String, port: UInt16)
    case serial(path: String, baud: Int)

    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    public init(parsing text: String) throws(Failure) {
        if text.hasPrefix("udp://") {
            var rest = String(text.dropFirst("udp://".count))
            if rest.hasSuffix("/") { rest.removeLast() }
            var host = rest
            var port = SMPTransport.udpPort
            if rest.hasPrefix("[") {
                // [IPv6]:port
                guard let close = rest.firstIndex(of: "]") else { throw Failure(description: "'\(text)': an IPv6 address needs its closing ]") }
                host = String(rest[rest.index(after: rest.startIndex)..<close])
                let after = rest[rest.index(after: close)...]
                if after.hasPrefix(":") {
                    guard let value = UInt16(after.dropFirst()), value > 0 else { throw Failure(description: "'\(text)': the port must be 1…65535") }
                    port = value
                }
            } else if let colon = rest.lastIndex(of: ":") {
                host = String(rest[..<colon])
                guard let value = UInt16(rest[rest.index(after: colon)...]), value > 0 else {
                    throw Failure(description: "'\(text)': the port must be 1…65535")
                }
                port = value
            }
            guard !host.isEmpty else { throw Failure(description: "'\(text)' names no host: write udp://192.0.2.1:1337") }
            self = .udp(host: host, port: port)
        } else if text.hasPrefix("serial://") {
            let rest = text.dropFirst("serial://".count)
            let parts = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
            let path = String(parts[0])
            guard path.hasPrefix("/") else { throw Failure(description: "'\(text)' needs an absolute device path: write serial:///dev/ttyACM0") }
            var baud = 115_200
            if parts.count == 2 {
                for pair in parts[1].split(separator: "&") {
                    let keyValue = pair.split(separator: "=", maxSplits: 1).map(String.init)
                    guard keyValue.count == 2, keyValue[0] == "baud", let value = Int(keyValue[1]), value > 0 else {
                        throw Failure(description: "'\(text)': the only serial:// key is baud=N (e.g. baud=115200)")
                    }
                    baud = value
                }
            }
            self = .serial(path: path, baud: baud)
        } else {
            throw Failure(description: "'\(text)' is neither udp:// nor serial://")
        }
    }
}

/// Opens SMP links to a UDP or serial device, again after each reset.
public struct SMPNetworkConnector: DeviceConnector {
    public let address: SMPNetworkAddress
    public let description: String

    public init(address: SMPNetworkAddress, description: String) {
        self.address = address
        self.description = description
    }

    public func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        switch address {
        case .udp(let host, let port):
            // One SMP message per datagram, as Zephyr's UDP transport expects; the device's buffer bounds its size.
            return try UDPLink(host: host, port: port, maximumPayload: 65_507)
        case .serial(let path, let baud):
            return SMPSerialLink(lines: try SerialLineLink(path: path, baud: baud))
        }
    }
}
