/// Addresses of devices reached over IP or a serial port.
/// Where a `udp://HOST[:PORT][?datagram=N]` or `serial:///dev/tty…[?baud=N]` address points.
public enum NetworkAddress: Sendable, Equatable {
    /// The port when the address names none: MCUmgr's, the one UDP update protocols use.
    public static let defaultUDPPort: UInt16 = 1337
    /// The longest datagram sent when the address names none: what an Ethernet frame carries in
    /// one IPv4 datagram (1500 − 20 − 8), and what smpclient and smpmgr send. A device reads no
    /// more of a datagram than its buffer (Zephyr's `CONFIG_MCUMGR_TRANSPORT_UDP_MTU`, 1500 by
    /// default, answers a longer one "corrupt", rc 9), so the link's own limit (65 507) is no guide.
    public static let defaultDatagramLimit = 1472

    /// `datagramLimit`: the most bytes one datagram carries (`?datagram=N`, 64…65 507).
    case udp(host: String, port: UInt16, datagramLimit: Int = NetworkAddress.defaultDatagramLimit)
    case serial(path: String, baud: Int)

    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    public init(parsing text: String) throws(Failure) {
        if text.hasPrefix("udp://") {
            var rest = String(text.dropFirst("udp://".count))
            var datagramLimit = Self.defaultDatagramLimit
            if let question = rest.firstIndex(of: "?") {
                let query = rest[rest.index(after: question)...]
                rest = String(rest[..<question])
                for pair in query.split(separator: "&") {
                    let keyValue = pair.split(separator: "=", maxSplits: 1).map(String.init)
                    guard keyValue.count == 2, keyValue[0] == "datagram", let value = Int(keyValue[1]), (64...65_507).contains(value) else {
                        throw Failure(description: "'\(text)': the only udp:// key is datagram=N, the longest datagram to send (64…65507, e.g. datagram=1472)")
                    }
                    datagramLimit = value
                }
            }
            if rest.hasSuffix("/") { rest.removeLast() }
            var host = rest
            var port = Self.defaultUDPPort
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
            self = .udp(host: host, port: port, datagramLimit: datagramLimit)
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
