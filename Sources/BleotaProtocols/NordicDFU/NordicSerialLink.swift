import BleotaCodec
import BleotaLink
import Logging

/// Nordic's serial DFU transport (UART and USB CDC bootloaders, `nrfutil dfu
/// serial`) as a ``/BleotaLink/ChannelLink``: the line carries the control
/// point alone, each packet on it one SLIP frame — a control point request or
/// answer, or object data as a Write request (0x08), which BLE carries on the
/// packet characteristic instead.
///
/// Both halves use it. Its ``/BleotaLink/LinkParameters/transport`` is
/// `LinkTransport.nordicSerial`, which is how a host and a device
/// half tell the serial transport, whose bootloader answers the serial-only
/// requests (Get MTU, Ping, Write) and no buttonless jump: `nrf_dfu_serial.c`.
/// The directory, answered here, lists the control point only.
package final class NordicSerialLink: MessageCarryingLink {
    package let lines: any DelimitedByteStream
    package let parameters: LinkParameters
    private let logger: Logger
    private let answers = Mailbox<ChannelMessage>()

    package init(lines: any DelimitedByteStream, logger: Logger = Logger(label: "bleota.nordic.serial")) {
        self.lines = lines
        self.logger = logger
        // One SLIP frame may carry a write of any length the bootloader's MTU allows;
        // the channel is not sent.
        parameters = LinkParameters(maximumPayload: 65_536, description: lines.parameters.description, transport: .nordicSerial)
    }

    /// The one channel on the line: the control point's.
    private static let controlPointChannel = NordicDFUChannel.controlPoint.rawValue

    package func send(_ message: ChannelMessage) async throws(LinkError) {
        switch message {
        case .directoryQuery:
            answers.put(.directory([Self.controlPointChannel]))
        case .packet(Self.controlPointChannel, let payload):
            try await lines.send(SLIP.encode(payload))
        case .packet(let channel, _), .read(let channel):
            throw .disconnected("the serial DFU transport has no \(NordicDFUChannel(rawValue: channel)?.description ?? "channel \(channel)")")
        // A serial bootloader has no other directory, and no write results.
        case .directory, .writeResult: return
        }
    }

    package func receiveMessage() async throws(LinkError) -> ChannelMessage {
        if let local = answers.poll() { return local }
        while true {
            let body = try await lines.receive(until: SLIP.end)
            guard !body.isEmpty else { continue }  // an END with nothing before it
            do {
                return .packet(Self.controlPointChannel, try SLIP.decode(body))
            } catch {
                // A frame damaged on the line is dropped; its request times out and is sent again.
                logger.debug("dropping a damaged SLIP frame: \(error)")
            }
        }
    }

    package func close() async { await lines.close() }
}

extension LinkTransport {
    /// Secure DFU's serial transport (UART, USB CDC): ``NordicSerialLink``.
    package static let nordicSerial = LinkTransport("Nordic serial DFU (SLIP)")
}
