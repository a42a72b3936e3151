/// Addresses of devices reached over IP or a serial port.
/// Where a `udp://HOST[:PORT]` or `serial:///dev/tty…[?baud=N]` address points.
public enum NetworkAddress: Sendable, Equatable {
    /// The port when the address names none: MCUmgr's, the one UDP update protocols use.
    public static let defaultUDPPort: UInt16 = 1337

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
