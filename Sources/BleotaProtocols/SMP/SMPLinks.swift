import BleotaCodec
import BleotaLink
import Logging

/// SMP over a serial line: each ``send(_:)`` is one whole SMP message, framed
/// into console lines (``SMPSerialFraming``); each ``receive()`` one whole
/// message rebuilt from them. Console output between frames is skipped.
public final class SMPSerialLink: Link {
    public let lines: any DelimitedByteStream
    public let lineLength: Int
    public let parameters: LinkParameters
    private let logger: Logger

    public init(lines: any DelimitedByteStream, lineLength: Int = 128, logger: Logger = Logger(label: "bleota.smp.serial")) {
        self.lines = lines
        self.lineLength = lineLength
        self.logger = logger
        parameters = LinkParameters(maximumPayload: 65_535, description: lines.parameters.description, carriesWholeMessages: true)
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
