import BleotaATT
import BleotaCodec

/// The characteristics of TI's OAD service (F000FFC0-0451-4000-B000-000000000000,
/// SimpleLink BLE5-Stack `oad.c`) as channels of a ``/BleotaLink/ChannelLink``.
package enum TIOADChannel: UInt8, Sendable, Hashable, CaseIterable {
    /// FFC1 Image Identify: the image's identity in, a one-byte status notified back.
    case identify = 0
    /// FFC2 Image Block: a block number and the image bytes it holds.
    case block = 1
    /// FFC5 Extended Control: commands in, answers and block requests notified back.
    case control = 2

    package static let service = BluetoothUUID("F000FFC0-0451-4000-B000-000000000000")!

    package var uuid: BluetoothUUID {
        switch self {
        case .identify: BluetoothUUID("F000FFC1-0451-4000-B000-000000000000")!
        case .block: BluetoothUUID("F000FFC2-0451-4000-B000-000000000000")!
        case .control: BluetoothUUID("F000FFC5-0451-4000-B000-000000000000")!
        }
    }

    package var gattChannel: GATTChannel {
        switch self {
        case .identify: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .request, update: .notify)
        case .block: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .command, update: .none)
        case .control: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .command, update: .notify)
        }
    }
}

/// OAD status codes (`oad.h`).
package enum TIOADStatus: UInt8, Sendable, Hashable, CustomStringConvertible {
    case success = 0, crcError = 1, flashError = 2, bufferOverflow = 3, alreadyStarted = 4, notStarted = 5
    case downloadNotComplete = 6, noResources = 7, imageTooBig = 8, incompatibleImage = 9, invalidFile = 10
    case incompatibleFile = 11, authenticationFailed = 12, extensionNotSupported = 13, downloadComplete = 14
    case cccdNotEnabled = 15, identifyTimeout = 16

    package var description: String {
        let names = [
            "OAD_SUCCESS", "OAD_CRC_ERR", "OAD_FLASH_ERR", "OAD_BUFFER_OFL (a block of the wrong number or length)",
            "OAD_ALREADY_STARTED", "OAD_NOT_STARTED", "OAD_DL_NOT_COMPLETE", "OAD_NO_RESOURCES",
            "OAD_IMAGE_TOO_BIG", "OAD_INCOMPATIBLE_IMAGE (an image type the device cannot run)",
            "OAD_INVALID_FILE (the image is for another chip family)", "OAD_INCOMPATIBLE_FILE (another BIM or metadata version)",
            "OAD_AUTH_FAIL", "OAD_EXT_NOT_SUPPORTED", "OAD_DL_COMPLETE", "OAD_CCCD_NOT_ENABLED", "OAD_IMG_ID_TIMEOUT",
        ]
        return "\(names[Int(rawValue)]) (\(rawValue))"
    }

    package static func name(_ raw: UInt8) -> String { TIOADStatus(rawValue: raw)?.description ?? "status \(raw)" }
}

/// Extended Control opcodes (`oad.h`).
package enum TIOADCommand: UInt8, Sendable, Hashable {
    case getBlockSize = 0x01
    case startOAD = 0x03
    case enableImage = 0x04
    case cancelOAD = 0x05
    case getSoftwareVersion = 0x07
    case getDeviceType = 0x10
    /// Device → host only: `12 status block(u32)`.
    case blockRequest = 0x12
    /// The single-byte answer to an opcode the device does not know.
    static let notSupported: UInt8 = 0xFF
}

/// A block request the device notifies on FFC5: the status of the previous block
/// and the number of the block it wants next.
package struct TIOADBlockRequest: Sendable, Hashable {
    package var status: UInt8
    package var block: UInt32

    package init(status: UInt8, block: UInt32) {
        self.status = status
        self.block = block
    }

    package func encode() -> [UInt8] { [TIOADCommand.blockRequest.rawValue, status] + TIOADWire.u32(block) }

    /// nil for anything but a 6-byte block request.
    package init?(decoding bytes: ArraySlice<UInt8>) {
        guard bytes.count == 6, bytes.first == TIOADCommand.blockRequest.rawValue else { return nil }
        status = bytes[bytes.startIndex + 1]
        block = TIOADWire.read(bytes.dropFirst(2))
    }
}

enum TIOADWire {
    static func u32(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * UInt32($0))) } }
    static func read(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        bytes.prefix(4).enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }
}

/// The 44-byte fixed header of a TI OAD image (`oad_image_header.h`): the image
/// ID ("CC26x2R1"), a CRC-32 of everything from offset 12 to the image's end, the
/// BIM and metadata versions, tech type, copy and CRC status, image type and
/// number, the length of the whole image, its software version.
package struct TIOADImageHeader: Sendable, Hashable {
    package static let size = 44
    package static let cc26x2 = Array("CC26x2R1".utf8)
    package static let cc13x2 = Array("CC13x2R1".utf8)
    /// The image IDs of the chip families this OAD serves (`OAD_IMG_ID_VAL` in `oad_image_header.h`:
    /// one per DeviceFamily; CC26X0R2's "OAD IMG " belongs to the older OAD this is not).
    package static let imageIDs = [cc26x2, cc13x2]
    /// crcStat's value for an image whose CRC was found wrong: `oadCheckDL` refuses it at once.
    package static let crcInvalid: UInt8 = 0xFC
    /// The BIM and metadata versions of BLE5-Stack's `oad_image_header.h`.
    package static let bimVersion: UInt8 = 3
    package static let metadataVersion: UInt8 = 1

    package var imageID: [UInt8]
    package var crc: UInt32
    package var bimVersion: UInt8
    package var metadataVersion: UInt8
    /// crcStat (offset 17): 0xFF not yet checked, 0xFE valid, 0xFC invalid.
    package var crcStatus: UInt8
    package var imageType: UInt8
    package var imageNumber: UInt8
    package var length: UInt32
    package var softwareVersion: [UInt8]

    package init(decoding image: some Collection<UInt8>) throws(TIOADImageError) {
        let bytes = Array(image.prefix(Self.size))
        guard bytes.count == Self.size else { throw TIOADImageError("the file is \(bytes.count) bytes, shorter than the 44-byte OAD header") }
        let slice = bytes[...]
        imageID = Array(bytes[0..<8])
        crc = TIOADWire.read(slice[8..<12])
        bimVersion = bytes[12]
        metadataVersion = bytes[13]
        crcStatus = bytes[17]
        imageType = bytes[18]
        imageNumber = bytes[19]
        length = TIOADWire.read(slice[24..<28])
        softwareVersion = Array(bytes[32..<36])
    }

    /// The 22 bytes of Image Identify, copied from the file's header (techType skipped).
    package static func identify(_ image: [UInt8]) -> [UInt8] {
        Array(image[0..<8]) + [image[12], image[13], image[16], image[17], image[18], image[19]] + Array(image[24..<28]) + Array(image[32..<36])
    }

    /// Why `image` is not an OAD image a device would take, or nil.
    package static func problem(_ image: [UInt8]) -> String? {
        let header: TIOADImageHeader
        do { header = try TIOADImageHeader(decoding: image) } catch { return error.description }
        guard Int(header.length) == image.count else {
            return "its header says \(header.length) bytes at offset 24, but the file has \(image.count)"
        }
        guard header.crcStatus != crcInvalid else {
            return "crcStat at offset 17 is 0xFC (CRC_INVALID), which the device refuses with OAD_CRC_ERR before checking anything"
        }
        guard CRC32.checksum(image[12...]) == header.crc else { return "the CRC-32 at offset 8 does not match bytes 12 to the end" }
        return nil
    }

    /// `code` behind a header and a contiguous-payload segment, as TI's `oad_image_tool` lays it out
    /// (image type 1, an application; for the simulator and tests).
    package static func sample(_ code: [UInt8], softwareVersion: String = "0002", imageID: [UInt8] = cc26x2) -> [UInt8] {
        var image = [UInt8](repeating: 0, count: size)
        image.replaceSubrange(0..<8, with: imageID.prefix(8))
        image[12] = bimVersion
        image[13] = metadataVersion
        image[14] = 0xFE
        image[15] = 0xFF  // tech type: BLE
        image[16] = 0xFF
        image[17] = 0xFF  // copy and CRC status: not yet
        image[18] = 1  // image type: application
        image.replaceSubrange(32..<36, with: Array(softwareVersion.utf8.prefix(4)))
        image[40] = UInt8(size)
        image[41] = 0  // header length
        // A contiguous-payload segment: type 1, BLE, its length, the start address.
        image += [0x01, 0xFE, 0xFF, 0xFF] + TIOADWire.u32(UInt32(12 + code.count)) + TIOADWire.u32(0)
        image += code
        image.replaceSubrange(24..<28, with: TIOADWire.u32(UInt32(image.count)))
        image.replaceSubrange(36..<40, with: TIOADWire.u32(UInt32(image.count - 1)))
        image.replaceSubrange(8..<12, with: TIOADWire.u32(CRC32.checksum(image[12...])))
        return image
    }
}

package struct TIOADImageError: Error, Sendable, Equatable, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}
