import BleotaCodec
import BleotaEngine

/// The native protocol's framing of the engine's transfer packets.
package struct NativeWire: TransferWire {
    /// Data packets go with the one-byte header of ``NativeMessage/CompactData``.
    package let compact: Bool
    /// The receiver takes ACK_INTERVAL (its HELLO announced ``NativeMessage/Capabilities/ackIntervalChange``).
    package let ackIntervalChanges: Bool

    package init(compact: Bool = false, ackIntervalChanges: Bool = false) {
        self.compact = compact
        self.ackIntervalChanges = ackIntervalChanges
    }

    package var dataOverhead: Int { compact ? NativeMessage.CompactData.headerSize : NativeMessage.dataHeaderSize }

    /// The same bytes as `NativeMessage.data(…).encode()`, built in one buffer: this runs
    /// once per packet, and the general encoder's intermediate arrays cost more than the CRC.
    package func encodeData(index: Int, payload: ArraySlice<UInt8>) -> [UInt8] {
        compact
            ? NativeMessage.CompactData.encode(index: index, payload: payload)
            : encodeData(sequence: SequenceNumber.wrap(index), payload: payload)
    }

    /// How far past the receiver's cumulative point packets may go: compact
    /// sequence numbers wrap at 96.
    package var sequenceSpan: Int? { compact ? NativeMessage.CompactData.spanLimit : nil }

    package func encodeData(sequence: UInt16, payload: ArraySlice<UInt8>) -> [UInt8] {
        var packet = [UInt8]()
        packet.reserveCapacity(payload.count + NativeMessage.dataHeaderSize)
        packet.append(NativeMessage.Opcode.data.rawValue)
        packet.append(UInt8(truncatingIfNeeded: sequence))
        packet.append(UInt8(truncatingIfNeeded: sequence >> 8))
        packet.append(contentsOf: payload)
        let crc = CRC16.checksum(packet, variant: .ccittFalse)
        packet.append(UInt8(truncatingIfNeeded: crc))
        packet.append(UInt8(truncatingIfNeeded: crc >> 8))
        return packet
    }

    package func encodeAckRequest() -> [UInt8] { NativeMessage.ackRequest.encode() }

    package func encodeAckInterval(_ interval: Int) -> [UInt8]? {
        guard ackIntervalChanges, (1...Int(UInt16.max)).contains(interval) else { return nil }
        return NativeMessage.ackInterval(UInt16(interval)).encode()
    }

    package func encodeAcknowledgement(nextExpected: UInt16, bitmap: [UInt8]) -> [UInt8] {
        NativeMessage.ack(.init(nextExpected: nextExpected, bitmap: bitmap)).encode()
    }

    package func encodeNegativeAcknowledgement(first: UInt16, count: UInt16, corrupt: Bool) -> [UInt8] {
        NativeMessage.nack(.init(first: first, count: count, reason: corrupt ? .corrupt : .gap)).encode()
    }

    package func decodeTransferPacket(_ packet: [UInt8]) -> TransferPacket {
        // Data packets, the bulk of a transfer, straight from the bytes (same checks as the general decoder).
        if packet.count >= NativeMessage.dataHeaderSize, packet[0] == NativeMessage.Opcode.data.rawValue {
            let end = packet.count - 2
            let carried = UInt16(packet[end]) | UInt16(packet[end + 1]) << 8
            let sequence = UInt16(packet[1]) | UInt16(packet[2]) << 8
            guard carried == CRC16.checksum(packet[..<end], variant: .ccittFalse) else {
                return .data(sequence: sequence, payload: [], intact: false)
            }
            return .data(sequence: sequence, payload: packet[3..<end], intact: true)
        }
        let message: NativeMessage
        do {
            message = try NativeMessage(decoding: packet)
        } catch {
            // A damaged data packet: report it, but its sequence number cannot be trusted.
            if packet.first == NativeMessage.Opcode.data.rawValue, packet.count >= 3 {
                return .data(sequence: UInt16(packet[1]) | UInt16(packet[2]) << 8, payload: [], intact: false)
            }
            return .other(packet)
        }
        switch message {
        case .data(let data): return .data(sequence: data.sequence, payload: data.payload[...], intact: true)
        case .ack(let ack): return .acknowledgement(nextExpected: ack.nextExpected, bitmap: ack.bitmap)
        case .nack(let nack): return .negativeAcknowledgement(first: nack.first, count: nack.count)
        case .ackRequest: return .ackRequest
        case .error(let reply): return .failure("device error (\(reply.status)): \(reply.message)")
        default: return .other(packet)
        }
    }
}
