import BleotaLink

/// Opens links to a UDP or serial device, again after each reset, with the
/// protocol's framing put on a serial port (a console's lines, SLIP frames).
public struct NetworkConnector: DeviceConnector {
    public let address: NetworkAddress
    public let description: String
    /// Puts the protocol's framing on a freshly opened serial port
    /// (`UpdateProtocol.frame(serial:)`); a datagram is a message as it is.
    public let frameSerial: @Sendable (any DelimitedByteStream) -> any Link

    public init(address: NetworkAddress, description: String, frameSerial: @escaping @Sendable (any DelimitedByteStream) -> any Link = { $0 }) {
        self.address = address
        self.description = description
        self.frameSerial = frameSerial
    }

    public func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        switch address {
        case .udp(let host, let port, let datagramLimit):
            // One message per datagram, no longer than the address allows (a device reads only so much of one).
            return try UDPLink(host: host, port: port, maximumPayload: datagramLimit)
        case .serial(let path, let baud):
            return frameSerial(try SerialLineLink(path: path, baud: baud))
        }
    }
}
