import BleotaCodec
import BleotaEngine
import BleotaLink

/// Nordic's legacy DFU (nRF5 SDK 11 bootloaders, Adafruit's nRF52
/// bootloader): the control point's operations and answers, and the init
/// packet. Layouts from SDK 11's `ble_dfu.h`/`dfu_init.h` and the Adafruit
/// bootloader; see protocols/nordic-legacy-dfu.md.
package enum NordicLegacyOperation: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// `01 type`, then the three sizes on the packet characteristic.
    case startDFU = 0x01
    /// `02 00` before the init packet's bytes, `02 01` after them.
    case initParameters = 0x02
    /// `03`, then the image on the packet characteristic.
    case receiveFirmware = 0x03
    case validate = 0x04
    /// Activate the new image and reset (no answer).
    case activateAndReset = 0x05
    /// Reset without activating (no answer).
    case reset = 0x06
    /// `07`: answered with the bytes received so far.
    case reportReceivedSize = 0x07
    /// `08 n:u16`: a receipt every n packets (no answer).
    case receiptRequest = 0x08

    package var description: String {
        switch self {
        case .startDFU: "start DFU"
        case .initParameters: "init parameters"
        case .receiveFirmware: "receive firmware"
        case .validate: "validate"
        case .activateAndReset: "activate and reset"
        case .reset: "reset"
        case .reportReceivedSize: "report received size"
        case .receiptRequest: "receipt request"
        }
    }
}

/// The answer codes of `10 op status`.
package enum NordicLegacyStatus: UInt8, Sendable, Hashable, CustomStringConvertible {
    case success = 1
    case invalidState = 2
    case notSupported = 3
    case dataSizeExceedsLimit = 4
    case crcError = 5
    case operationFailed = 6

    package var description: String {
        switch self {
        case .success: "success"
        case .invalidState: "not in a state to do that (an update already started in this boot: reset the device)"
        case .notSupported: "not supported (sizes must be multiples of 4, and an application cannot go with a SoftDevice or bootloader)"
        case .dataSizeExceedsLimit: "the image does not fit the device's flash"
        case .crcError: "the image's CRC does not match its init packet: the image was damaged on the way or changed after packaging"
        case .operationFailed: "the init packet was refused (device type must be 0x0052 on Adafruit boards, and sd_req must name the SoftDevice) or the device was overrun"
        }
    }
}

/// The image types of Start DFU (a bit mask).
package enum NordicLegacyImageType: UInt8, Sendable, Hashable {
    case softDevice = 1
    case bootloader = 2
    case softDeviceAndBootloader = 3
    case application = 4
}

/// What the legacy bootloader notifies on its control point.
package enum NordicLegacyNotification: Sendable, Hashable {
    /// `10 op status`.
    case response(NordicLegacyOperation, NordicLegacyStatus)
    /// `10 07 01 size:u32`.
    case receivedSize(UInt32)
    /// `11 bytes:u32`: a receipt, with the firmware bytes received so far.
    case receipt(UInt32)
    /// `10 op 03` for an operation code the bootloader does not know.
    case notSupported(operation: UInt8)

    package func encode() -> [UInt8] {
        var writer = ByteWriter()
        switch self {
        case .response(let operation, let status):
            writer.write(UInt8(0x10))
            writer.write(operation.rawValue)
            writer.write(status.rawValue)
        case .receivedSize(let size):
            writer.write(UInt8(0x10))
            writer.write(NordicLegacyOperation.reportReceivedSize.rawValue)
            writer.write(NordicLegacyStatus.success.rawValue)
            writer.write(size, .little)
        case .receipt(let bytes):
            writer.write(UInt8(0x11))
            writer.write(bytes, .little)
        case .notSupported(let code):
            writer.write(UInt8(0x10))
            writer.write(code)
            writer.write(NordicLegacyStatus.notSupported.rawValue)
        }
        return writer.bytes
    }

    package init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        let code = try reader.readUInt8("legacy DFU notification code")
        switch code {
        case 0x10:
            let rawOperation = try reader.readUInt8("legacy DFU response operation")
            let rawStatus = try reader.readUInt8("legacy DFU status")
            guard let status = NordicLegacyStatus(rawValue: rawStatus) else {
                throw DecodingError(field: "legacy DFU status", offset: 2, reason: .invalidValue("\(rawStatus) is not a status (1…6)"))
            }
            guard let operation = NordicLegacyOperation(rawValue: rawOperation) else {
                guard status == .notSupported else {
                    throw DecodingError(field: "legacy DFU response operation", offset: 1, reason: .invalidValue("0x\(String(rawOperation, radix: 16)) is not an operation"))
                }
                self = .notSupported(operation: rawOperation)
                try reader.expectEnd("legacy DFU notification")
                return
            }
            if operation == .reportReceivedSize, status == .success {
                self = .receivedSize(try reader.readUInt32(.little, "legacy DFU received size"))
            } else {
                self = .response(operation, status)
            }
        case 0x11:
            self = .receipt(try reader.readUInt32(.little, "legacy DFU receipt bytes"))
        default:
            throw DecodingError(field: "legacy DFU notification code", offset: 0, reason: .invalidValue("0x\(String(code, radix: 16)), expected 0x10 or 0x11"))
        }
        try reader.expectEnd("legacy DFU notification")
    }
}

/// The legacy init packet (`dfu_init_packet_t`, dfu_version 0.5): device
/// type and revision, application version, the SoftDevices it runs on, and
/// the CRC-16/CCITT-FALSE of the image.
package struct NordicLegacyInitPacket: Sendable, Hashable {
    /// What Adafruit's bootloader requires as the device type.
    package static let adafruitDeviceType: UInt16 = 0x0052
    package var deviceType: UInt16
    package var deviceRevision: UInt16
    package var applicationVersion: UInt32
    package var softDeviceRequirements: [UInt16]
    /// The CRC-16 of the whole image (the first two extension bytes).
    package var imageCRC: UInt16
    /// Extension bytes after the CRC (dfu_version 0.6–0.8), kept as they are.
    package var extra: [UInt8]

    package init(
        deviceType: UInt16 = adafruitDeviceType, deviceRevision: UInt16 = 0xFFFF, applicationVersion: UInt32 = 0xFFFF_FFFF,
        softDeviceRequirements: [UInt16] = [0xFFFE], imageCRC: UInt16, extra: [UInt8] = []
    ) {
        self.deviceType = deviceType
        self.deviceRevision = deviceRevision
        self.applicationVersion = applicationVersion
        self.softDeviceRequirements = softDeviceRequirements
        self.imageCRC = imageCRC
        self.extra = extra
    }

    /// The CRC a legacy init packet carries for `image`.
    package static func crc(of image: [UInt8]) -> UInt16 {
        var crc = CRC16(.ccittFalse)
        crc.update(image)
        return crc.value
    }

    package func encode() -> [UInt8] {
        var writer = ByteWriter()
        writer.write(deviceType, .little)
        writer.write(deviceRevision, .little)
        writer.write(applicationVersion, .little)
        writer.write(UInt16(truncatingIfNeeded: softDeviceRequirements.count), .little)
        for requirement in softDeviceRequirements { writer.write(requirement, .little) }
        writer.write(imageCRC, .little)
        writer.write(contentsOf: extra)
        return writer.bytes
    }

    package init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        deviceType = try reader.readUInt16(.little, "init.device_type")
        deviceRevision = try reader.readUInt16(.little, "init.device_rev")
        applicationVersion = try reader.readUInt32(.little, "init.app_version")
        let count = Int(try reader.readUInt16(.little, "init.softdevice_len"))
        guard count <= 32 else {
            throw DecodingError(field: "init.softdevice_len", offset: 8, reason: .invalidValue("\(count) SoftDevices, more than a packet of 128 bytes holds"))
        }
        var requirements: [UInt16] = []
        for _ in 0..<count { requirements.append(try reader.readUInt16(.little, "init.softdevice")) }
        softDeviceRequirements = requirements
        imageCRC = try reader.readUInt16(.little, "init.crc16")
        extra = reader.readRemaining()
    }
}

/// A read of the DFU Revision characteristic, answered by its value: a 16-bit little-endian
/// revision, 0x0001 in an application that can jump, 0x0008 in the bootloader (SDK 7–11).
struct NordicLegacyRevisionRequest: ChannelRequest {
    var what: String { "a read of its DFU revision" }
    func encode() -> ChannelMessage { .read(channel: NordicLegacyChannel.revision.rawValue) }
    func response(from message: ChannelMessage) -> UInt16? {
        guard case .packet(let channel, let value) = message, channel == NordicLegacyChannel.revision.rawValue, value.count == 2 else { return nil }
        var reader = ByteReader(value)
        return try? reader.readUInt16(.little, "revision")
    }
}
