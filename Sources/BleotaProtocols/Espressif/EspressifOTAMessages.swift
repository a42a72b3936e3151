import BleotaATT
import BleotaCodec

/// The characteristics of Espressif's BLE OTA service (0x8018, esp-iot-solution
/// `ble_ota` and `ble_ota_raw`) as channels of a ``/BleotaLink/ChannelLink``.
package enum EspressifOTAChannel: UInt8, Sendable, Hashable, CaseIterable {
    /// 0x8020 RECV_FW: firmware packets in, sector acknowledgements notified out.
    case firmware = 0
    /// 0x8021 PROGRESS_BAR: read or notified progress, unused by bleota.
    case progress = 1
    /// 0x8022 COMMAND: START and STOP in, command acknowledgements notified out.
    case command = 2
    /// 0x8023 CUSTOMER: the vendor's own data, ignored by the OTA profile.
    case customer = 3

    package static let service = BluetoothUUID.bit16(0x8018)

    package var uuid: BluetoothUUID { .bit16(0x8020 + UInt16(rawValue)) }

    package var gattChannel: GATTChannel {
        switch self {
        case .firmware: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .command, update: .notify)
        case .progress: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .none, update: .notify, readable: true)
        case .command: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .request, update: .notify)
        case .customer: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .request, update: .notify)
        }
    }
}

/// A message that does not decode: which field, at which offset, and why.
package struct EspressifOTAError: Error, Sendable, Equatable, CustomStringConvertible {
    package var field: String
    package var offset: Int
    package var problem: String
    package var description: String { "\(field) at offset \(offset): \(problem)" }
}

/// The CRC every Espressif OTA message carries: CRC-16/XMODEM (poly 0x1021, init 0,
/// not reflected), little-endian — the one the device and both of Espressif's apps compute.
enum EspressifCRC {
    static func of(_ bytes: some Collection<UInt8>) -> UInt16 {
        var crc = CRC16(.xmodem)
        crc.update(bytes)
        return crc.value
    }

    static func appended(to bytes: [UInt8]) -> [UInt8] {
        let crc = of(bytes)
        return bytes + [UInt8(crc & 0xFF), UInt8(crc >> 8)]
    }

    /// Whether the last two bytes are the CRC of the rest.
    static func verifies(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard bytes.count >= 2 else { return false }
        let body = bytes.dropLast(2)
        let stored = UInt16(bytes[bytes.endIndex - 2]) | UInt16(bytes[bytes.endIndex - 1]) << 8
        return of(body) == stored
    }
}

/// A command to 0x8022: 20 bytes, the id, a zero-padded payload and the CRC over bytes 0…17.
package enum EspressifCommand: Sendable, Hashable {
    /// 0x0001: begin, with the image's length.
    case start(length: UInt32)
    /// 0x0002: the host is done (the device resets its protocol state).
    case stop

    package static let startID: UInt16 = 0x0001
    package static let stopID: UInt16 = 0x0002

    package var id: UInt16 {
        switch self {
        case .start: Self.startID
        case .stop: Self.stopID
        }
    }

    package func encode() -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 18)
        bytes[0] = UInt8(id & 0xFF)
        bytes[1] = UInt8(id >> 8)
        if case .start(let length) = self {
            for index in 0..<4 { bytes[2 + index] = UInt8(truncatingIfNeeded: length >> (8 * UInt32(index))) }
        }
        return EspressifCRC.appended(to: bytes)
    }

    /// As `ble_ota_raw` reads it: exactly 20 bytes, a CRC that verifies, a known id.
    package init(decoding bytes: ArraySlice<UInt8>) throws(EspressifOTAError) {
        guard bytes.count == 20 else { throw EspressifOTAError(field: "command", offset: 0, problem: "is \(bytes.count) bytes, not 20") }
        guard EspressifCRC.verifies(bytes) else { throw EspressifOTAError(field: "crc", offset: 18, problem: "does not match bytes 0…17") }
        let base = bytes.startIndex
        let id = UInt16(bytes[base]) | UInt16(bytes[base + 1]) << 8
        switch id {
        case Self.startID:
            let length = (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[base + 2 + $1]) << (8 * UInt32($1)) }
            self = .start(length: length)
        case Self.stopID:
            self = .stop
        default:
            throw EspressifOTAError(field: "command id", offset: 0, problem: "0x\(String(id, radix: 16)) is neither START (1) nor STOP (2)")
        }
    }
}

/// The device's answer to a command, notified on 0x8022: `03 00`, the command's id,
/// the status, and (ble_ota_raw, START accepted) the sector window at byte 6.
package struct EspressifCommandAck: Sendable, Hashable {
    package static let ackID: UInt16 = 0x0003
    package var command: UInt16
    package var accepted: Bool
    /// Sectors the host may send before waiting for their acknowledgements (1…64); 0 when the device does not say.
    package var window: UInt8

    package init(command: UInt16, accepted: Bool, window: UInt8 = 0) {
        self.command = command
        self.accepted = accepted
        self.window = window
    }

    package func encode() -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 18)
        bytes[0] = UInt8(Self.ackID & 0xFF)
        bytes[2] = UInt8(command & 0xFF)
        bytes[3] = UInt8(command >> 8)
        bytes[4] = accepted ? 0 : 1
        bytes[6] = window
        return EspressifCRC.appended(to: bytes)
    }

    package init(decoding bytes: ArraySlice<UInt8>) throws(EspressifOTAError) {
        guard bytes.count == 20 else { throw EspressifOTAError(field: "command ack", offset: 0, problem: "is \(bytes.count) bytes, not 20") }
        guard EspressifCRC.verifies(bytes) else { throw EspressifOTAError(field: "crc", offset: 18, problem: "does not match bytes 0…17") }
        let base = bytes.startIndex
        guard UInt16(bytes[base]) | UInt16(bytes[base + 1]) << 8 == Self.ackID else {
            throw EspressifOTAError(field: "ack id", offset: 0, problem: "is not 0x0003")
        }
        command = UInt16(bytes[base + 2]) | UInt16(bytes[base + 3]) << 8
        accepted = bytes[base + 4] == 0 && bytes[base + 5] == 0
        window = bytes[base + 6]
    }
}

/// A firmware packet to 0x8020: sector index, sequence (0xFF for a sector's
/// last packet), data, and on the last packet the CRC of the whole sector.
package struct EspressifFirmwarePacket: Sendable, Hashable {
    package static let lastSequence: UInt8 = 0xFF
    package var sector: UInt16
    package var sequence: UInt8
    package var data: ArraySlice<UInt8>
    /// The sector's CRC, on its last packet only.
    package var sectorCRC: UInt16?

    package init(sector: UInt16, sequence: UInt8, data: ArraySlice<UInt8>, sectorCRC: UInt16? = nil) {
        self.sector = sector
        self.sequence = sequence
        self.data = data
        self.sectorCRC = sectorCRC
    }

    package var isLast: Bool { sequence == Self.lastSequence }

    package func encode() -> [UInt8] {
        var bytes = [UInt8(sector & 0xFF), UInt8(sector >> 8), sequence]
        bytes += data
        if let sectorCRC { bytes += [UInt8(sectorCRC & 0xFF), UInt8(sectorCRC >> 8)] }
        return bytes
    }

    package init(decoding bytes: ArraySlice<UInt8>) throws(EspressifOTAError) {
        guard bytes.count >= 3 else { throw EspressifOTAError(field: "firmware packet", offset: 0, problem: "is \(bytes.count) bytes, shorter than its 3-byte header") }
        let base = bytes.startIndex
        sector = UInt16(bytes[base]) | UInt16(bytes[base + 1]) << 8
        sequence = bytes[base + 2]
        if sequence == Self.lastSequence {
            guard bytes.count >= 5 else { throw EspressifOTAError(field: "sector crc", offset: 3, problem: "a sector's last packet carries its 2-byte CRC") }
            data = bytes[(base + 3)..<(bytes.endIndex - 2)]
            sectorCRC = UInt16(bytes[bytes.endIndex - 2]) | UInt16(bytes[bytes.endIndex - 1]) << 8
        } else {
            data = bytes[(base + 3)...]
            sectorCRC = nil
        }
    }
}

/// The device's answer to a sector, notified on 0x8020.
package struct EspressifSectorAck: Sendable, Hashable {
    package enum Status: UInt16, Sendable, Hashable, CustomStringConvertible {
        case success = 0x0000
        case crcError = 0x0001
        case sectorIndexError = 0x0002
        case payloadLengthError = 0x0003

        package var description: String {
            switch self {
            case .success: "success"
            case .crcError: "sector CRC error"
            case .sectorIndexError: "sector index error"
            case .payloadLengthError: "payload length or sequence error"
            }
        }
    }

    package var sector: UInt16
    package var status: Status
    /// The sector the device expects next (legacy NimBLE devices leave it 0 on success).
    package var expected: UInt16

    package init(sector: UInt16, status: Status, expected: UInt16) {
        self.sector = sector
        self.status = status
        self.expected = expected
    }

    package func encode() -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 18)
        bytes[0] = UInt8(sector & 0xFF)
        bytes[1] = UInt8(sector >> 8)
        bytes[2] = UInt8(status.rawValue & 0xFF)
        bytes[3] = UInt8(status.rawValue >> 8)
        bytes[4] = UInt8(expected & 0xFF)
        bytes[5] = UInt8(expected >> 8)
        return EspressifCRC.appended(to: bytes)
    }

    package init(decoding bytes: ArraySlice<UInt8>) throws(EspressifOTAError) {
        guard bytes.count == 20 else { throw EspressifOTAError(field: "sector ack", offset: 0, problem: "is \(bytes.count) bytes, not 20") }
        guard EspressifCRC.verifies(bytes) else { throw EspressifOTAError(field: "crc", offset: 18, problem: "does not match bytes 0…17") }
        let base = bytes.startIndex
        sector = UInt16(bytes[base]) | UInt16(bytes[base + 1]) << 8
        let raw = UInt16(bytes[base + 2]) | UInt16(bytes[base + 3]) << 8
        guard let status = Status(rawValue: raw) else { throw EspressifOTAError(field: "status", offset: 2, problem: "0x\(String(raw, radix: 16)) is not a sector status") }
        self.status = status
        expected = UInt16(bytes[base + 4]) | UInt16(bytes[base + 5]) << 8
    }
}

/// What ESP-IDF's `esp_ota_end` checks of an application image, as far as bleota
/// can check it too: the magic byte 0xE9, and the SHA-256 appended when the
/// header's `hash_appended` byte (offset 23) is 1.
package enum ESPAppImage {
    package static let magic: UInt8 = 0xE9
    package static let headerSize = 24

    /// Why the device would refuse `image`, or nil.
    package static func problem(_ image: some Collection<UInt8>) -> String? {
        let bytes = Array(image)
        guard bytes.count > headerSize, bytes[0] == magic else {
            return "it does not start with an ESP application header (magic byte 0xE9)"
        }
        if bytes[23] == 1 {
            guard bytes.count >= headerSize + 32 else { return "it is too short to carry its appended SHA-256" }
            guard SHA256Digest.hash(bytes.dropLast(32)) == Array(bytes.suffix(32)) else {
                return "its appended SHA-256 does not match its bytes"
            }
        }
        return nil
    }

    /// `content` behind an ESP application header with its SHA-256 appended (for the simulator and tests).
    package static func sample(_ content: [UInt8]) -> [UInt8] {
        var header = [UInt8](repeating: 0, count: headerSize)
        header[0] = magic
        header[1] = 1
        header[23] = 1
        var image = header + content
        while (image.count + 1) % 16 != 0 { image.append(0) }
        image.append(0xEF)
        return image + SHA256Digest.hash(image)
    }
}
