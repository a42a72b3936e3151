import BleotaATT
import BleotaCodec

/// The characteristics of Dialog/Renesas SUOTA (service 0xFEF5, SUOTA 1.3) as
/// channels of a ``/BleotaLink/ChannelLink``.
package enum SUOTAChannel: UInt8, Sendable, Hashable, CaseIterable {
    /// MEM_DEV: the memory type to write and the commands (end, reboot, abort), u32 LE.
    case memoryDevice = 0
    /// GPIO_MAP: the external memory's pins (DA1458x), u32 LE.
    case gpioMap = 1
    /// MEM_INFO: bytes received so far, u32 LE (read).
    case memoryInfo = 2
    /// PATCH_LEN: the block size, u16 LE.
    case patchLength = 3
    /// PATCH_DATA: image bytes, written without response.
    case patchData = 4
    /// SERV_STATUS: one status byte, notified.
    case status = 5
    /// VERSION (1.3): 13 (read).
    case version = 6
    /// PATCH_DATA_CHAR_SIZE (1.3): the largest PATCH_DATA write, u16 LE (read).
    case patchDataSize = 7
    /// MTU (1.3): the link's ATT MTU, u16 LE (read).
    case mtu = 8
    /// L2CAP_PSM (1.2, optional): the LE PSM of the credit-based channel the image may travel on, u16 LE (read).
    case l2capPSM = 9

    package static let service = BluetoothUUID.bit16(0xFEF5)

    /// Not a characteristic: the image data on the LE credit-based channel at L2CAP_PSM's PSM
    /// (SUOTA 1.2+), raw image bytes as SDUs, flow-controlled by credits alone.
    package static let creditData: UInt8 = 10

    /// The PSM the SDK's examples use (`SUOTA_PSM`).
    package static let defaultPSM: UInt16 = 0x81

    package var uuid: BluetoothUUID {
        switch self {
        case .memoryDevice: BluetoothUUID("8082CAA8-41A6-4021-91C6-56F9B954CC34")!
        case .gpioMap: BluetoothUUID("724249F0-5EC3-4B5F-8804-42345AF08651")!
        case .memoryInfo: BluetoothUUID("6C53DB25-47A1-45FE-A022-7C92FB334FD4")!
        case .patchLength: BluetoothUUID("9D84B9A3-000C-49D8-9183-855B673FDA31")!
        case .patchData: BluetoothUUID("457871E8-D516-4CA1-9116-57D0B17B9CB2")!
        case .status: BluetoothUUID("5F78DF94-798C-46F5-990A-B3EB6A065C88")!
        case .version: BluetoothUUID("64B4E8B5-0DE5-401B-A21D-ACC8DB3B913A")!
        case .patchDataSize: BluetoothUUID("42C3DFDD-77BE-4D9C-8454-8F875267FB3B")!
        case .mtu: BluetoothUUID("B7DE1EEA-823D-43BB-A3AF-C4903DFCE23C")!
        case .l2capPSM: BluetoothUUID("61C8849C-F639-4765-946E-5C3419BEBB2A")!
        }
    }

    package var gattChannel: GATTChannel {
        switch self {
        case .memoryDevice, .gpioMap, .patchLength:
            GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .request, update: .none, readable: true)
        case .patchData: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .command, update: .none)
        case .status: GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .none, update: .notify, readable: true)
        case .memoryInfo, .version, .patchDataSize, .mtu, .l2capPSM:
            GATTChannel(number: rawValue, service: Self.service, characteristic: uuid, write: .none, update: .none, readable: true)
        }
    }
}

/// SERV_STATUS values (`suotar.h`, `dlg_suota.c`).
package enum SUOTAStatus: UInt8, Sendable, Hashable, CustomStringConvertible {
    case serviceStarted = 0x01
    /// A block arrived whole, or (after END) the image verified.
    case completeOK = 0x02
    case serviceExit = 0x03
    case crcError = 0x04
    case patchLengthError = 0x05
    case externalMemoryWriteError = 0x06
    case internalMemoryError = 0x07
    case invalidMemoryType = 0x08
    case applicationError = 0x09
    case imageStarted = 0x10
    case invalidImageBank = 0x11
    case invalidImageHeader = 0x12
    case invalidImageSize = 0x13
    case invalidProductHeader = 0x14
    case sameImage = 0x15
    case externalMemoryReadError = 0x16

    package var description: String {
        switch self {
        case .serviceStarted: "SRV_STARTED (0x01)"
        case .completeOK: "CMP_OK (0x02)"
        case .serviceExit: "SRV_EXIT (0x03): the device left SUOTA (aborted, not ready, out of memory or another connection)"
        case .crcError: "CRC_ERR (0x04): the image's CRC does not match its header"
        case .patchLengthError: "PATCH_LEN_ERR (0x05): a block longer than PATCH_LEN"
        case .externalMemoryWriteError: "EXT_MEM_WRITE_ERR (0x06): the flash write failed or the image is too long"
        case .internalMemoryError: "INT_MEM_ERR (0x07): PATCH_LEN is larger than the device's buffer"
        case .invalidMemoryType: "INVAL_MEM_TYPE (0x08)"
        case .applicationError: "APP_ERROR (0x09)"
        case .imageStarted: "IMG_STARTED (0x10)"
        case .invalidImageBank: "INVAL_IMG_BANK (0x11)"
        case .invalidImageHeader: "INVAL_IMG_HDR (0x12): the image header's signature is wrong"
        case .invalidImageSize: "INVAL_IMG_SIZE (0x13): the image is empty or larger than the update partition"
        case .invalidProductHeader: "INVAL_PRODUCT_HDR (0x14)"
        case .sameImage: "SAME_IMG_ERR (0x15): the device already has this version and timestamp"
        case .externalMemoryReadError: "EXT_MEM_READ_ERR (0x16)"
        }
    }

    /// "status 0x2a" for a value the table lacks.
    package static func name(_ raw: UInt8) -> String {
        SUOTAStatus(rawValue: raw)?.description ?? "status 0x" + String(raw, radix: 16)
    }
}

/// A MEM_DEV value: the top byte a memory type or a command, the rest its parameter.
package enum SUOTAMemoryCommand: Sendable, Hashable {
    /// 0x13: the image goes to SPI/QSPI flash (the only type DA1468x/DA1469x take); the parameter is the bank.
    case spiFlash(bank: UInt32)
    /// 0xFE: the image is complete: verify it.
    case end
    /// 0xFD: reboot (into the new image once it verified).
    case reboot
    /// 0xFF: abort and leave SUOTA.
    case abort
    /// Any other top byte (legacy patch modes, I2C EEPROM, RAM, invalid).
    case other(UInt32)

    package var value: UInt32 {
        switch self {
        case .spiFlash(let bank): 0x1300_0000 | (bank & 0x00FF_FFFF)
        case .end: 0xFE00_0000
        case .reboot: 0xFD00_0000
        case .abort: 0xFF00_0000
        case .other(let value): value
        }
    }

    package init(value: UInt32) {
        switch value >> 24 {
        case 0x13: self = .spiFlash(bank: value & 0x00FF_FFFF)
        case 0xFE: self = .end
        case 0xFD: self = .reboot
        case 0xFF: self = .abort
        default: self = .other(value)
        }
    }

    package func encode() -> [UInt8] { SUOTAWire.u32(value) }
}

enum SUOTAWire {
    static func u32(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * UInt32($0))) } }
    static func u16(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }
    static func read(_ bytes: some Collection<UInt8>) -> UInt32? {
        guard !bytes.isEmpty, bytes.count <= 4 else { return nil }
        return bytes.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }
}

/// A DA1469x image as `mkimage` writes it (SDK10, `suota.h`): a 34-byte header
/// — "Qq", the code's size, its CRC-32, a 16-byte version, a timestamp, the
/// offset of the code (`pointer_to_ivt`) — a header extension up to that
/// offset, then the code. The device checks the signature and size on the
/// first block and the CRC-32 of the code at END.
package struct SUOTAImageHeader: Sendable, Hashable {
    package static let signature: [UInt8] = [0x51, 0x71]
    package static let size = 34

    package var codeSize: UInt32
    package var crc: UInt32
    package var version: String
    package var timestamp: UInt32
    package var codeOffset: UInt32

    /// Reads a header; a field that does not decode is named with its offset.
    package init(decoding bytes: some Collection<UInt8>) throws(SUOTAImageError) {
        let data = Array(bytes.prefix(Self.size))
        guard data.count == Self.size else { throw SUOTAImageError("the header is \(data.count) bytes, a DA1469x image's is 34") }
        guard Array(data[0..<2]) == Self.signature else {
            let found = data[0..<2].map { String(format: "%02x", $0) }.joined(separator: " ")
            // suota_1_1_image_header_t (DA1468x SDK suota.h) begins "pa".
            if data[0] == 0x70, data[1] == 0x61 {
                throw SUOTAImageError("signature at offset 0 is \(found) (\"pa\"): a DA1468x image, which bleota does not read; it reads DA1469x images (\"Qq\")")
            }
            throw SUOTAImageError("signature at offset 0 is \(found), not \"Qq\" (51 71): give the image mkimage made")
        }
        codeSize = SUOTAWire.read(data[2..<6])!
        crc = SUOTAWire.read(data[6..<10])!
        version = String(decoding: data[10..<26].prefix { $0 != 0 }, as: UTF8.self)
        timestamp = SUOTAWire.read(data[26..<30])!
        codeOffset = SUOTAWire.read(data[30..<34])!
        guard codeOffset >= UInt32(Self.size) else { throw SUOTAImageError("pointer_to_ivt at offset 30 is \(codeOffset), inside the header") }
    }

    /// Why `image` would be refused, or nil: header, size, CRC-32 of the code.
    package static func problem(_ image: [UInt8]) -> String? {
        let header: SUOTAImageHeader
        do { header = try SUOTAImageHeader(decoding: image) } catch { return error.description }
        let end = Int(header.codeOffset) + Int(header.codeSize)
        guard header.codeSize > 0, end <= image.count else {
            return "the header says \(header.codeSize) bytes of code from offset \(header.codeOffset), but the file has \(image.count) bytes"
        }
        guard CRC32.checksum(image[Int(header.codeOffset)..<end]) == header.crc else {
            return "the CRC-32 of the code does not match the header's"
        }
        return nil
    }

    /// `code` as an image with a header and an extension up to offset 0x400 (for the simulator and tests).
    package static func sample(_ code: [UInt8], version: String = "1.0.0", timestamp: UInt32 = 1) -> [UInt8] {
        let offset: UInt32 = 0x400
        var image = signature + SUOTAWire.u32(UInt32(code.count)) + SUOTAWire.u32(CRC32.checksum(code))
        image += Array(version.utf8.prefix(16)) + [UInt8](repeating: 0, count: 16 - min(16, version.utf8.count))
        image += SUOTAWire.u32(timestamp) + SUOTAWire.u32(offset)
        image += [UInt8](repeating: 0xFF, count: Int(offset) - image.count)
        return image + code
    }
}

package struct SUOTAImageError: Error, Sendable, Equatable, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}
