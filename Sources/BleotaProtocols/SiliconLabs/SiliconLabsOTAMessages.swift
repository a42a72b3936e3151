import BleotaATT
import BleotaCodec

/// The characteristics of Silicon Labs' OTA DFU service (AppLoader and the
/// application's in-place trigger, Gecko SDK; service 1d14d6ee-…) as channels
/// of a ``/BleotaLink/ChannelLink``.
///
/// An application offers OTA Control (and, optionally, the version
/// characteristics); the AppLoader offers OTA Control, OTA Data and all four
/// versions. Which of them a connection has tells the host where the device is.
package enum SiliconLabsOTAChannel: UInt8, Sendable, Hashable, CaseIterable {
    /// OTA Control: one byte, written with response; the device answers with
    /// the ATT Write Response or an Error Response carrying its OTA error code.
    case control = 0
    /// OTA Data: the GBL file, in order, written without response (≤ 244 bytes a write).
    case data = 1
    /// AppLoader version: four u16 LE (major, minor, patch, build) (read).
    case apploaderVersion = 2
    /// OTA version: the protocol's compatibility number, 3 since SDK 2.7.0 (read).
    case otaVersion = 3
    /// Gecko Bootloader version, u32 LE (read).
    case bootloaderVersion = 4
    /// Application version: APP_PROPERTIES_VERSION of the installed application, u32 LE; 0 with none (read).
    case applicationVersion = 5

    package static let service = BluetoothUUID("1D14D6EE-FD63-4FA1-BFA4-8F47B42119F0")!

    package var uuid: BluetoothUUID {
        switch self {
        case .control: BluetoothUUID("F7BF3564-FB6D-4E53-88A4-5E37E0326063")!
        case .data: BluetoothUUID("984227F3-34FC-4045-A5D0-2C581F81A153")!
        case .apploaderVersion: BluetoothUUID("4F4A2368-8CCA-451E-BFFF-CF0E2EE23E9F")!
        case .otaVersion: BluetoothUUID("4CC07BCF-0868-4B32-9DAD-BA4CC41E5316")!
        case .bootloaderVersion: BluetoothUUID("25F05C0A-E917-46E9-B2A5-AA2BE1245AFE")!
        case .applicationVersion: BluetoothUUID("0D77CC11-4AC1-49F2-BFA9-CD96AC7A92F8")!
        }
    }

    package var gattChannel: GATTChannel {
        switch self {
        case .control: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .answeredRequest, update: .none)
        case .data: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .command, update: .none)
        case .apploaderVersion, .otaVersion, .bootloaderVersion, .applicationVersion:
            GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .none, update: .none, readable: true)
        }
    }
}

/// What the host writes to OTA Control.
package enum SiliconLabsOTAControl: UInt8, Sendable, Hashable {
    /// In the application: reboot into the AppLoader (any value does). In the
    /// AppLoader: begin an upload, the write position back at 0.
    case begin = 0x00
    /// The whole GBL file was sent: the AppLoader verifies it and answers.
    case end = 0x03
    /// Ask the device to close the connection (it then boots what it verified).
    case close = 0x04
}

/// The AppLoader's answers to an OTA Control write, carried as the ATT error
/// code of the Write Response (UG266 / AN1086, "OTA error codes").
package enum SiliconLabsOTAError: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// The GBL file's CRC-32 (or its signature) does not match.
    case crcError = 0x80
    /// Data or an end before the begin (0x00) of this connection.
    case wrongState = 0x81
    /// The AppLoader ran out of buffer space.
    case buffersFull = 0x82
    /// The image does not fit in flash.
    case imageTooBig = 0x83
    /// The GBL could not be parsed (not a GBL, or a partial update across SDK versions).
    case notSupported = 0x84
    /// The Gecko bootloader could not erase or write.
    case bootloaderError = 0x85
    /// Not a bootloader the AppLoader works with (a UART DFU one).
    case incorrectBootloader = 0x86
    /// The new application would overlap the AppLoader.
    case applicationOverlapsAppLoader = 0x87
    /// The Gecko bootloader is older than 1.11.
    case incompatibleBootloaderVersion = 0x88
    /// The application version check (OTA flag bit 1) refused the image.
    case applicationVersionCheckFailed = 0x89

    package var description: String {
        switch self {
        case .crcError: "CRC_ERROR (the GBL's CRC-32 or signature does not match)"
        case .wrongState: "WRONG_STATE (no begin (0x00) on this connection)"
        case .buffersFull: "BUFFERS_FULL (the AppLoader ran out of buffer space)"
        case .imageTooBig: "IMAGE_TOO_BIG (the image does not fit in flash)"
        case .notSupported: "NOT_SUPPORTED (not a GBL file the AppLoader can parse)"
        case .bootloaderError: "BOOTLOADER (the Gecko bootloader could not write flash)"
        case .incorrectBootloader: "INCORRECT_BOOTLOADER (the device's bootloader does not support OTA)"
        case .applicationOverlapsAppLoader: "APPLICATION_OVERLAP_APPLOADER (the image would overwrite the AppLoader)"
        case .incompatibleBootloaderVersion: "INCOMPATIBLE_BOOTLOADER_VERSION (the Gecko bootloader is older than 1.11)"
        case .applicationVersionCheckFailed: "APPLICATION_VERSION_CHECK_FAIL (the device refuses this application version)"
        }
    }

    /// The name for any code the device answers with, known or not.
    package static func name(_ code: UInt8) -> String {
        SiliconLabsOTAError(rawValue: code)?.description ?? "ATT error 0x\([code].hexString)"
    }
}

/// A GBL file (Gecko Bootloader image, version 3): tags of `id: u32 LE,
/// length: u32 LE, value`, the header first and the end tag last, whose
/// CRC-32 covers every byte from the file's start through the end tag's
/// 8-byte header. Parsed without trusting a byte of it.
package struct GeckoBootloaderImage: Sendable, Hashable {
    /// Tag identifiers (Gecko SDK `btl_gbl_format.h`).
    package enum Tag: UInt32, Sendable, Hashable {
        case header = 0x03A6_17EB
        /// The application versions the file may be installed over (`commander gbl create --dep-app`).
        case versionDependency = 0x76A6_17EB
        case application = 0xF40A_0AF4
        case bootloader = 0xF509_09F5
        case secureElementUpgrade = 0x5EA6_17EB
        case metadata = 0xF608_08F6
        case program = 0xFE01_01FE
        case eraseThenProgram = 0xFD03_03FD
        case programLZ4 = 0xFD05_05FD
        case programLZMA = 0xFD07_07FD
        case encryptionHeader = 0xFB05_05FB
        case encryptionInit = 0xFA06_06FA
        case encryptedData = 0xF907_07F9
        case signature = 0xF70A_0AF7
        case certificate = 0xF30B_0BF3
        case end = 0xFC04_04FC
    }

    /// A range of flash the file programs.
    package struct Program: Sendable, Hashable {
        package var address: UInt32
        package var length: Int
    }

    /// The header's format version (0x03xxxxxx).
    package var formatVersion: UInt32
    /// The header's type bits: 0x1 encrypted, 0x100 signed.
    package var imageType: UInt32
    /// The application tag's version (APP_PROPERTIES_VERSION), when the file carries an application.
    package var applicationVersion: UInt32?
    package var programs: [Program]
    /// Where the end tag's CRC ends: bytes after it (Commander pads a compressed file to a
    /// multiple of 4) are not part of the image, and the Gecko bootloader's parser ignores them.
    package var length: Int

    package var isEncrypted: Bool { imageType & 0x1 != 0 }
    package var isSigned: Bool { imageType & 0x100 != 0 }

    /// Parses `bytes` as a GBL file up to its end tag; throws the field and offset of the first problem.
    package init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = ByteReader(bytes)
        let first = try reader.readUInt32(.little, "header tag")
        guard first == Tag.header.rawValue else {
            throw DecodingError(field: "header tag", offset: 0, reason: .invalidValue("0x\(String(first, radix: 16)) is not a GBL header tag (0x03a617eb)"))
        }
        let headerLength = try reader.readUInt32(.little, "header length")
        guard headerLength >= 8 else {
            throw DecodingError(field: "header length", offset: 4, reason: .invalidValue("\(headerLength), shorter than version and type"))
        }
        formatVersion = try reader.readUInt32(.little, "header version")
        guard formatVersion >> 24 == 0x03 else {
            throw DecodingError(field: "header version", offset: 8, reason: .invalidValue("0x\(String(formatVersion, radix: 16)): only GBL version 3 (0x03xxxxxx) is known"))
        }
        imageType = try reader.readUInt32(.little, "header type")
        try reader.skip(Int(headerLength) - 8, "header")
        var applicationVersion: UInt32?
        var programs: [Program] = []
        while true {
            let tagOffset = reader.offset
            let id = try reader.readUInt32(.little, "tag id")
            let tagLength = Int(try reader.readUInt32(.little, "tag length"))
            guard tagLength <= reader.remaining else {
                throw DecodingError(field: "tag length", offset: tagOffset + 4, reason: .truncated(needed: tagLength - reader.remaining))
            }
            switch Tag(rawValue: id) {
            case .end?:
                guard tagLength == 4 else {
                    throw DecodingError(field: "end tag length", offset: tagOffset + 4, reason: .invalidValue("\(tagLength), not 4"))
                }
                let stored = try reader.readUInt32(.little, "end tag CRC-32")
                let computed = CRC32.checksum(bytes[0..<(tagOffset + 8)])
                guard stored == computed else {
                    throw DecodingError(
                        field: "end tag CRC-32", offset: tagOffset + 8,
                        reason: .invalidValue("0x\(String(stored, radix: 16)), but the file's bytes give 0x\(String(computed, radix: 16))"))
                }
                self.applicationVersion = applicationVersion
                self.programs = programs
                length = reader.offset
                return
            case .application?:
                guard tagLength >= 8 else {
                    throw DecodingError(field: "application tag length", offset: tagOffset + 4, reason: .invalidValue("\(tagLength), shorter than type and version"))
                }
                _ = try reader.readUInt32(.little, "application type")
                applicationVersion = try reader.readUInt32(.little, "application version")
                try reader.skip(tagLength - 8, "application tag")
            case .program?, .eraseThenProgram?:
                guard tagLength >= 4 else {
                    throw DecodingError(field: "program tag length", offset: tagOffset + 4, reason: .invalidValue("\(tagLength), shorter than its address"))
                }
                let address = try reader.readUInt32(.little, "program address")
                programs.append(Program(address: address, length: tagLength - 4))
                try reader.skip(tagLength - 4, "program data")
            case .header?:
                throw DecodingError(field: "tag id", offset: tagOffset, reason: .invalidValue("a second header tag"))
            case nil:
                throw DecodingError(field: "tag id", offset: tagOffset, reason: .invalidValue("0x\(String(id, radix: 16)) is no GBL tag"))
            default:
                try reader.skip(tagLength, "tag value")
            }
        }
    }

    /// Why `bytes` is not a GBL file an AppLoader would take, or nil.
    package static func problem(_ bytes: [UInt8]) -> String? {
        let image: GeckoBootloaderImage
        do { image = try GeckoBootloaderImage(decoding: bytes) } catch { return error.description }
        // An encrypted file's application tag is inside its ciphertext: say it is encrypted, not that it has none.
        guard !image.isEncrypted else { return "it is encrypted, which only the device can check" }
        guard image.applicationVersion != nil else { return "it carries no application tag (a bootloader-only GBL): bleota flashes applications" }
        return nil
    }

    /// `program` as a GBL file: header (version 3, plain), application tag
    /// with `applicationVersion`, one program tag at `address`, end tag with
    /// its CRC (for the simulator and tests). Commander writes the
    /// erase-then-program tag where this writes the plain program tag, which
    /// the bootloader's parser takes alike.
    package static func sample(_ program: [UInt8], applicationVersion: UInt32, address: UInt32 = 0) -> [UInt8] {
        func u32(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
        func tag(_ tag: Tag, _ value: [UInt8]) -> [UInt8] { u32(tag.rawValue) + u32(UInt32(value.count)) + value }
        var file = tag(.header, u32(0x0300_0000) + u32(0))
        // Application tag: type (bit 0, APPLICATION_TYPE_ZIGBEE in application_properties.h; the
        // AppLoader does not look at it), version, capabilities, product ID.
        file += tag(.application, u32(1) + u32(applicationVersion) + u32(0) + [UInt8](repeating: 0, count: 16))
        file += tag(.program, u32(address) + program)
        file += u32(Tag.end.rawValue) + u32(4)
        file += u32(CRC32.checksum(file))
        return file
    }
}
