import BleotaEngine

/// ACME OTA's data packets and status notifications, as bleota's transfer
/// engine understands them: implementing this one type gets the protocol
/// windowing, selective resend of what was lost, sequence-number wrap-around,
/// adaptive pacing and tuning.
public struct AcmeWire: TransferWire {
    public init() {}

    /// Opcode, index and CRC-16.
    public var dataOverhead: Int { 5 }

    public func encodeData(sequence: UInt16, payload: ArraySlice<UInt8>) -> [UInt8] {
        AcmeMessage.data(index: sequence, payload: Array(payload)).encode()
    }

    public func encodeAckRequest() -> [UInt8] { AcmeMessage.poll.encode() }

    public func encodeAcknowledgement(nextExpected: UInt16, bitmap: [UInt8]) -> [UInt8] {
        AcmeMessage.status(.ok, next: nextExpected, count: 0).encode()
    }

    public func encodeNegativeAcknowledgement(first: UInt16, count: UInt16, corrupt: Bool) -> [UInt8] {
        AcmeMessage.status(.missing, next: first, count: count).encode()
    }

    public func decodeTransferPacket(_ packet: [UInt8]) -> TransferPacket {
        switch try? AcmeMessage(decoding: packet) {
        case .data(let index, let payload)?: return .data(sequence: index, payload: payload[...], intact: true)
        case .status(.ok, let next, _)?: return .acknowledgement(nextExpected: next, bitmap: [])
        case .status(.missing, let next, let count)?: return .negativeAcknowledgement(first: next, count: max(1, count))
        case .status(let status, _, _)? where status == .tooLarge || status == .badState:
            return .failure("the device answered \(status)")
        case .poll?: return .ackRequest
        default:
            // A DATA packet whose CRC failed: its index cannot be trusted, but it did arrive.
            if packet.first == AcmeMessage.Opcode.data.rawValue, packet.count >= 3 {
                return .data(sequence: UInt16(packet[1]) | UInt16(packet[2]) << 8, payload: [], intact: false)
            }
            return .other(packet)
        }
    }
}
