/// Opens links to a UDP or serial device, again after each reset, with the
/// protocol's framing put on them (a serial console's line framing, say).
public struct NetworkConnector: DeviceConnector {
    public let address: NetworkAddress
    public let description: String
    /// Puts the protocol's framing on a freshly opened raw link.
    public let frame: @Sendable (any Link) -> any Link

    public init(address: NetworkAddress, description: String, frame: @escaping @Sendable (any Link) -> any Link = { $0 }) {
        self.address = address
        self.description = description
        self.frame = frame
    }

    public func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        switch address {
        case .udp(let host, let port):
            // One message per datagram; the device's buffer bounds its size.
            return frame(try UDPLink(host: host, port: port, maximumPayload: 65_507))
        case .serial(let path, let baud):
            return frame(try SerialLineLink(path: path, baud: baud))
        }
    }
}
