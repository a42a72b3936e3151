import BleotaCodec
import BleotaLink
import Logging

/// Nordic's serial DFU transport (UART and USB CDC bootloaders, `nrfutil dfu
/// serial`) as a ``/BleotaLink/ChannelLink``: each control point
/// request or answer is one SLIP frame; object data, which BLE carries on the
/// packet characteristic, travels as a Write request (0x08) on the same line.
///
/// Both halves use it. The host writes ``NordicDFUChannel/controlPoint`` and
/// ``NordicDFUChannel/packet`` packets and asks the directory (answered here:
/// a serial bootloader has both and no buttonless jump); every frame received
/// comes up on the control point channel, so the device half sees data as
/// `08 …` requests, the way `nrf_dfu_serial.c` does.
public final class NordicSerialLink: Link, ChannelLink {
    public let lines: any DelimitedByteStream
    public let parameters: LinkParameters
    private let logger: Logger
    private let answers = Mailbox<ChannelMessage>()

    public init(lines: any DelimitedByteStream, logger: Logger = Logger(label: "bleota.nordic.serial")) {
        self.lines = lines
        self.logger = logger
        // One SLIP frame may carry a write of any length the bootloader's MTU allows;
        // the channel is not sent.
        parameters = LinkParameters(maximumPayload: 65_536, description: lines.parameters.description)
    }

    public var channelLink: any ChannelLink { self }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard let message = ChannelFrame.decode(packet) else { return }
        try await send(message)
    }

    public func send(_ message: ChannelMessage) async throws(LinkError) {
        switch message {
        case .directoryQuery:
            answers.put(.directory([NordicDFUChannel.controlPoint.rawValue, NordicDFUChannel.packet.rawValue]))
        case .packet(let channel, let payload):
            switch NordicDFUChannel(rawValue: channel) {
            case .controlPoint?: try await lines.send(SLIP.encode(payload))
            case .packet?: try await lines.send(SLIP.encode(CollectionOfOne(NordicDFUOperation.write.rawValue) + payload))
            default: throw .disconnected("the serial DFU transport has no \(NordicDFUChannel(rawValue: channel)?.description ?? "channel \(channel)")")
            }
        // The line carries no directory (a serial bootloader has both channels) and no write results.
        case .directory, .writeResult: return
        }
    }

    public func receive() async throws(LinkError) -> [UInt8] { ChannelFrame.encode(try await receiveMessage()) }

    public func receiveMessage() async throws(LinkError) -> ChannelMessage {
        if let local = answers.poll() { return local }
        while true {
            let body = try await lines.receive(until: SLIP.end)
            guard !body.isEmpty else { continue }  // an END with nothing before it
            do {
                return .packet(NordicDFUChannel.controlPoint.rawValue, try SLIP.decode(body))
            } catch {
                // A frame damaged on the line is dropped; its request times out and is sent again.
                logger.debug("dropping a damaged SLIP frame: \(error)")
            }
        }
    }

    public func close() async { await lines.close() }
}
