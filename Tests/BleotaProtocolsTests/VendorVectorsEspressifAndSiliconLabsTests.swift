import BleotaATT
import BleotaCodec
import Foundation
import Testing

@testable import BleotaProtocols

/// Third-party vectors for two vendor protocols (issue 30, item 7): bytes taken
/// from Espressif's and Silicon Labs' published sources and from Silicon Labs'
/// own tool, never from bleota's encoders.
///
/// - Espressif BLE OTA: every message below was laid out by hand from the
///   device's code and Espressif's Android app, each CRC computed outside
///   bleota (Python `binascii.crc_hqx(data, 0)`, which is the same register
///   the device's `crc16_ccitt` runs: polynomial 0x1021, initial 0, not
///   reflected, no final XOR, i.e. CRC-16/XMODEM), and written here as literals.
/// - Silicon Labs OTA DFU: constants from the Gecko SDK and Simplicity Connect,
///   a GBL file written tag by tag from `btl_gbl_format.h` (its CRC-32 computed
///   with zlib outside bleota), and GBL files that Simplicity Commander
///   1v25p1b2000 made (`Fixtures/silabs/`, `scripts/silabs-fixtures.sh`;
///   Commander is published by Silicon Labs on PyPI as
///   `silabs-pycommander-cli` 1.3.0).
@Suite struct VendorVectorsEspressifAndSiliconLabsTests {

    // MARK: - Espressif BLE OTA

    /// The CRC of every Espressif OTA message is the device's `crc16_ccitt`:
    /// polynomial 0x1021, initial value 0, MSB first, no final XOR — the
    /// catalogue's CRC-16/XMODEM (check value 0x31C3), not CRC-16/CCITT-FALSE
    /// (initial 0xFFFF, check 0x29B1) despite the function's name.
    ///
    /// Sources: espressif/esp-iot-solution
    /// `components/bluetooth/ble_profiles/esp/ble_ota_raw/src/esp_ble_ota_raw.c`
    /// at 2dada1378c3a7e7d973bfc3fb030234c978febda, `crc16_ccitt` ("poly 0x1021,
    /// init 0x0000"); the same function in
    /// `components/bluetooth/ble_profiles/esp/ble_ota/src/ble_ota.c` at
    /// 56c551b66dd2f1b9ea84376af0f5a97bd282a1e7; EspressifApps/esp-ble-ota-android
    /// `app/src/main/java/com/espressif/bleota/android/EspCRC16.java` at
    /// aea01881b4f43b425f85e87ef5061af5f8e792b3, `EspCRC16.crc` (init 0, 0x1021, masked to 16 bits).
    /// The sector CRC: `esp_ble_ota_recv_fw_data` runs `crc16_ccitt` over the
    /// sector's bytes (`fw_sector_buf`, `fw_sector_offset` of them); the app's
    /// `initPackets` over the whole sector (`EspCRC16.crc(sector)`).
    @Test func theCRCIsTheDevicesCRC16XMODEM() {
        #expect(EspressifCRC.of(Array("123456789".utf8)) == 0x31C3)
        #expect(EspressifCRC.of(Array("123456789".utf8)) != 0x29B1, "not CRC-16/CCITT-FALSE")
        // The ten bytes of a short last sector used in the firmware packet test below.
        #expect(EspressifCRC.of(Self.shortSector) == 0xB511)
        // CRC of an 18-byte command body: the START below.
        #expect(EspressifCRC.of(Array(Self.start200000.prefix(18))) == 0xE3B1)
    }

    /// START, image length 200 000 (0x00030D40): id 0x0001 LE, the length u32
    /// LE in bytes 2…5, bytes 6…17 zero, CRC-16/XMODEM of bytes 0…17 = 0xE3B1,
    /// stored little-endian in bytes 18…19.
    ///
    /// Sources: esp-iot-solution `esp_ble_ota_raw.c` at
    /// 2dada1378c3a7e7d973bfc3fb030234c978febda: `BLE_OTA_CMD_START 0x0001`,
    /// `BLE_OTA_CMD_PACKET_LEN 20`, `BLE_OTA_CMD_CRC_DATA_LEN 18`,
    /// `esp_ble_ota_recv_cmd_data` (length must be 20, CRC at bytes 18…19 over
    /// bytes 0…17, else a REJECT ack), `handle_start_cmd` ("payload[2..5]:
    /// total firmware length in bytes (little-endian)"); esp-ble-ota-android
    /// `BleOTAClient.kt` at 04abaa6397cd013df37d82e45d45db0d433627e6,
    /// `genCommandPacket` and `postCommandStart`; `examples/bluetooth/ble_ota/README.md`
    /// at 79418cb51658a64e8f4e851b7088ce201537f64e, "2.1 Command package format".
    @Test func startCommandPacket() throws {
        #expect(EspressifCommand.startID == 0x0001)
        #expect(EspressifCommand.start(length: 200_000).encode() == Self.start200000)
        #expect(try EspressifCommand(decoding: Self.start200000[...]) == .start(length: 200_000))

        // The same body with a CRC-16/CCITT-FALSE (0xA61A) the device would refuse.
        var ccittFalse = Self.start200000
        ccittFalse[18] = 0x1A
        ccittFalse[19] = 0xA6
        #expect(throws: EspressifOTAError.self) { try EspressifCommand(decoding: ccittFalse[...]) }
        // The CRC big-endian instead of little-endian.
        var bigEndian = Self.start200000
        bigEndian.swapAt(18, 19)
        #expect(throws: EspressifOTAError.self) { try EspressifCommand(decoding: bigEndian[...]) }
        // Not 20 bytes: the device answers REJECT.
        #expect(throws: EspressifOTAError.self) { try EspressifCommand(decoding: Self.start200000.dropLast()) }
    }

    /// STOP: id 0x0002, bytes 2…17 zero, CRC 0xF043.
    ///
    /// Sources: `esp_ble_ota_raw.c` at 2dada1378c3a7e7d973bfc3fb030234c978febda,
    /// `BLE_OTA_CMD_STOP 0x0002`, `handle_stop_cmd`; `BleOTAClient.kt` at
    /// 04abaa6397cd013df37d82e45d45db0d433627e6, `COMMAND_ID_END = 0x0002` and
    /// `postCommandEnd` (an empty payload).
    @Test func stopCommandPacket() throws {
        let stop = Self.message([0x02, 0x00], crc: [0x43, 0xF0])
        #expect(EspressifCommand.stopID == 0x0002)
        #expect(EspressifCommand.stop.id == 0x0002)
        #expect(EspressifCommand.stop.encode() == stop)
        #expect(try EspressifCommand(decoding: stop[...]) == .stop)
    }

    /// Command acknowledgements, notified on COMMAND (0x8022): `03 00`, the
    /// command's id (u16 LE), the status (u16 LE: 0x0000 accept, 0x0001
    /// reject), for an accepted START the sector window in byte 6, zeros, CRC.
    ///
    /// Sources: `esp_ble_ota_raw.c` at 2dada1378c3a7e7d973bfc3fb030234c978febda:
    /// `BLE_OTA_CMD_ACK 0x0003`, `ble_ota_cmd_ack_status_t`
    /// (`BLE_OTA_CMD_ACK_ACCEPT 0x0000`, `BLE_OTA_CMD_ACK_REJECT 0x0001`),
    /// `send_cmd_ack`, `send_start_cmd_ack` ("Byte 6: recommended sector send
    /// window"); `ble_ota.c` at 56c551b66dd2f1b9ea84376af0f5a97bd282a1e7,
    /// `esp_ble_ota_send_ack_data` (`BLE_OTA_CMD_ACK` case, no window byte);
    /// `BleOTAClient.kt`, `COMMAND_ACK_ACCEPT`/`COMMAND_ACK_REFUSE` and `parseCommandPacket`.
    @Test func commandAcknowledgements() throws {
        // START accepted with a window of 3 sectors (the raw profile's example: a 12 KiB ring buffer).
        let startAccepted = Self.message([0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x03], crc: [0xC9, 0xAD])
        // START refused (an upload already runs, length 0, a damaged command).
        let startRefused = Self.message([0x03, 0x00, 0x01, 0x00, 0x01, 0x00], crc: [0x37, 0xD3])
        // STOP accepted, as both profiles send it (no window).
        let stopAccepted = Self.message([0x03, 0x00, 0x02, 0x00, 0x00, 0x00], crc: [0x1B, 0x40])

        #expect(EspressifCommandAck.ackID == 0x0003)
        #expect(EspressifCommandAck(command: EspressifCommand.startID, accepted: true, window: 3).encode() == startAccepted)
        #expect(EspressifCommandAck(command: EspressifCommand.startID, accepted: false).encode() == startRefused)
        #expect(EspressifCommandAck(command: EspressifCommand.stopID, accepted: true).encode() == stopAccepted)

        let accepted = try EspressifCommandAck(decoding: startAccepted[...])
        #expect(accepted.command == EspressifCommand.startID && accepted.accepted && accepted.window == 3)
        let refused = try EspressifCommandAck(decoding: startRefused[...])
        #expect(refused.command == EspressifCommand.startID && !refused.accepted && refused.window == 0)
        let stopped = try EspressifCommandAck(decoding: stopAccepted[...])
        #expect(stopped.command == EspressifCommand.stopID && stopped.accepted && stopped.window == 0)

        // A START command is not an acknowledgement.
        #expect(throws: EspressifOTAError.self) { try EspressifCommandAck(decoding: Self.start200000[...]) }
    }

    /// Firmware packets to RECV_FW (0x8020): sector index u16 LE, packet
    /// sequence u8 (0, 1, …; 0xFF marks the sector's last packet), data, and on
    /// the last packet the CRC-16 of the whole sector, u16 LE. The sector here
    /// is an image's short last sector (index 2, 10 bytes), sent in two packets;
    /// its CRC is 0xB511.
    ///
    /// Sources: `esp_ble_ota_raw.c` at 2dada1378c3a7e7d973bfc3fb030234c978febda,
    /// `esp_ble_ota_recv_fw_data` ("Frame layout: [sector:2][packet:1][payload...],
    /// packet=0xFF means sector tail"; the tail's last two payload bytes are the
    /// received CRC, `get_u16_le`), `BLE_OTA_FW_HEADER_LEN 3`;
    /// `BleOTAClient.kt` at 04abaa6397cd013df37d82e45d45db0d433627e6,
    /// `initPackets` (index LE, `sequence = -1` written as 0xFF, CRC LE after
    /// the data); `examples/bluetooth/ble_ota/README.md`, "2.2 Firmware package format".
    @Test func firmwarePackets() throws {
        let first: [UInt8] = [0x02, 0x00, 0x00, 0xE9, 0x03, 0x02, 0x20, 0x10]
        let last: [UInt8] = [0x02, 0x00, 0xFF, 0x12, 0x34, 0x56, 0x78, 0x9A, 0x11, 0xB5]

        #expect(EspressifFirmwarePacket.lastSequence == 0xFF)
        #expect(EspressifFirmwarePacket(sector: 2, sequence: 0, data: Self.shortSector[0..<5]).encode() == first)
        #expect(EspressifFirmwarePacket(sector: 2, sequence: 0xFF, data: Self.shortSector[5...], sectorCRC: 0xB511).encode() == last)

        let decodedFirst = try EspressifFirmwarePacket(decoding: first[...])
        #expect(decodedFirst.sector == 2 && decodedFirst.sequence == 0 && !decodedFirst.isLast)
        #expect(Array(decodedFirst.data) == Array(Self.shortSector[0..<5]) && decodedFirst.sectorCRC == nil)
        let decodedLast = try EspressifFirmwarePacket(decoding: last[...])
        #expect(decodedLast.sector == 2 && decodedLast.isLast)
        #expect(Array(decodedLast.data) == Array(Self.shortSector[5...]))
        #expect(decodedLast.sectorCRC == 0xB511)
        #expect(decodedLast.sectorCRC == EspressifCRC.of(Self.shortSector))
    }

    /// Sector acknowledgements, notified on RECV_FW: the sector index, the
    /// status (u16 LE: 0 success, 1 CRC error, 2 sector index error, 3 payload
    /// length error), the sector the device expects next (u16 LE), zeros, CRC.
    ///
    /// Sources: `esp_ble_ota_raw.c` at 2dada1378c3a7e7d973bfc3fb030234c978febda,
    /// `ble_ota_fw_ack_status_t` (`BLE_OTA_FW_ACK_SUCCESS 0x0000`,
    /// `BLE_OTA_FW_ACK_CRC_ERR 0x0001`, `BLE_OTA_FW_ACK_INDEX_ERR 0x0002`,
    /// `BLE_OTA_FW_ACK_LEN_ERR 0x0003`), `send_fw_ack(sector, status,
    /// expected_sector)` and its callers in `esp_ble_ota_recv_fw_data` (a
    /// success names `cur_sector` after the increment; an index error the
    /// sector still expected; a packet out of sequence answers LEN_ERR);
    /// `ble_ota.c` at 56c551b66dd2f1b9ea84376af0f5a97bd282a1e7,
    /// `ble_ota_fw_ack_statuc_t` and `esp_ble_ota_send_ack_data` (`BLE_OTA_FW_ACK`);
    /// `BleOTAClient.kt`, `BIN_ACK_*` and `parseSectorAck` (bytes 4…5: the
    /// index the device expects); `examples/bluetooth/ble_ota/README.md`, "ACK_Status".
    @Test func sectorAcknowledgements() throws {
        let vectors: [(bytes: [UInt8], ack: EspressifSectorAck)] = [
            // Sector 0 written; sector 1 next.
            (
                Self.message([0x00, 0x00, 0x00, 0x00, 0x01, 0x00], crc: [0x61, 0x7B]),
                EspressifSectorAck(sector: 0, status: .success, expected: 1)
            ),
            // Sector 3's CRC did not match; sector 3 again.
            (
                Self.message([0x03, 0x00, 0x01, 0x00, 0x03, 0x00], crc: [0xF5, 0x25]),
                EspressifSectorAck(sector: 3, status: .crcError, expected: 3)
            ),
            // Sector 5 arrived while 3 was expected.
            (
                Self.message([0x05, 0x00, 0x02, 0x00, 0x03, 0x00], crc: [0x5C, 0xCD]),
                EspressifSectorAck(sector: 5, status: .sectorIndexError, expected: 3)
            ),
            // A packet of sector 3 out of sequence (or a sector over 4096 bytes).
            (
                Self.message([0x03, 0x00, 0x03, 0x00, 0x03, 0x00], crc: [0x9C, 0x65]),
                EspressifSectorAck(sector: 3, status: .payloadLengthError, expected: 3)
            ),
        ]
        #expect(EspressifSectorAck.Status.success.rawValue == 0x0000)
        #expect(EspressifSectorAck.Status.crcError.rawValue == 0x0001)
        #expect(EspressifSectorAck.Status.sectorIndexError.rawValue == 0x0002)
        #expect(EspressifSectorAck.Status.payloadLengthError.rawValue == 0x0003)
        for (bytes, ack) in vectors {
            #expect(ack.encode() == bytes)
            #expect(try EspressifSectorAck(decoding: bytes[...]) == ack)
        }
        // Status 4 is none of the vendor's: refused although its CRC (0x0D03) is right.
        let unknown = Self.message([0x03, 0x00, 0x04, 0x00, 0x03, 0x00], crc: [0x03, 0x0D])
        #expect(throws: EspressifOTAError.self) { try EspressifSectorAck(decoding: unknown[...]) }
    }

    /// The GATT service 0x8018 and its characteristics RECV_FW 0x8020,
    /// PROGRESS_BAR 0x8021, COMMAND 0x8022, CUSTOMER 0x8023.
    ///
    /// Source: `ble_ota.c` at 56c551b66dd2f1b9ea84376af0f5a97bd282a1e7,
    /// `BLE_OTA_SERVICE_UUID`, `RECV_FW_UUID`, `OTA_BAR_UUID`, `COMMAND_UUID`,
    /// `CUSTOMER_UUID`; `BleOTAClient.kt`, `SERVICE_UUID` … `CHAR_CUSTOMER_UUID`.
    @Test func espressifServiceAndCharacteristics() {
        #expect(EspressifOTAChannel.service == .bit16(0x8018))
        #expect(EspressifOTAChannel.firmware.uuid == .bit16(0x8020))
        #expect(EspressifOTAChannel.progress.uuid == .bit16(0x8021))
        #expect(EspressifOTAChannel.command.uuid == .bit16(0x8022))
        #expect(EspressifOTAChannel.customer.uuid == .bit16(0x8023))
    }

    /// START for 200 000 bytes, CRC 0xE3B1 (see `startCommandPacket`).
    static let start200000 = Self.message([0x01, 0x00, 0x40, 0x0D, 0x03, 0x00], crc: [0xB1, 0xE3])
    /// A 20-byte Espressif message: `head`, zeros through byte 17, then the two CRC bytes (low byte first).
    static func message(_ head: [UInt8], crc: [UInt8]) -> [UInt8] {
        var bytes = head
        bytes += [UInt8](repeating: 0, count: 18 - head.count)
        bytes += crc
        return bytes
    }

    /// A 10-byte last sector (it starts like an ESP image: magic 0xE9).
    static let shortSector: [UInt8] = [0xE9, 0x03, 0x02, 0x20, 0x10, 0x12, 0x34, 0x56, 0x78, 0x9A]

    // MARK: - Silicon Labs OTA DFU

    /// OTA Control values: 0x00 begins (in the application: reboot into the
    /// AppLoader), 0x03 ends the upload.
    ///
    /// Sources: SiliconLabsSoftware/simplicity-connect-android at
    /// 737baf6ee3628960d1050977a3ed0aed9db4bc39 (release 3.3.0),
    /// `mobile/src/main/java/com/siliconlabs/bledemo/features/scan/browser/activities/DeviceServicesActivity.kt`,
    /// `OTA_CONTROL_START_COMMAND: Byte = 0x00`, `OTA_CONTROL_END_COMMAND: Byte = 0x03`;
    /// the Gecko SDK's NCP host example `app/bluetooth/example_host/ota_dfu/main.c`
    /// (as mirrored in YuhangZho/ZigbeeSiliconV3 at
    /// ab0bd8d4bb6c1048adef81d0e66d96006c2fabd9), `ota_change_state`: `OTA_BEGIN`
    /// and `OTA_RESET_TO_DFU` write `"\0"`, `OTA_END` writes `"\x03"`.
    @Test func otaControlValues() {
        #expect(SiliconLabsOTAControl.begin.rawValue == 0x00)
        #expect(SiliconLabsOTAControl.end.rawValue == 0x03)
        #expect(SiliconLabsOTAControl(rawValue: 0x00) == .begin)
        #expect(SiliconLabsOTAControl(rawValue: 0x03) == .end)
    }

    /// The AppLoader's error codes, the ATT error of OTA Control's write
    /// response: 0x80 CRC (or signature) failure, 0x81 OTA not begun with 0x00,
    /// 0x82 out of buffer space, 0x83 image too large (or overlapping the
    /// AppLoader), 0x84 GBL parsing failed, 0x85 the bootloader could not erase
    /// or write, 0x86 wrong type of bootloader, 0x87 the application would
    /// overlap the AppLoader.
    ///
    /// Source: simplicity-connect-android at 737baf6ee3628960d1050977a3ed0aed9db4bc39,
    /// `mobile/src/main/java/com/siliconlabs/bledemo/Bluetooth/BLE/ErrorCodes.kt`,
    /// `getATTErrorDescription` (0x80 … 0x87). (0x88 and 0x89 are not in that
    /// list; nothing here asserts them.)
    @Test func appLoaderErrorCodes() {
        let vectors: [(code: UInt8, error: SiliconLabsOTAError)] = [
            (0x80, .crcError),
            (0x81, .wrongState),
            (0x82, .buffersFull),
            (0x83, .imageTooBig),
            (0x84, .notSupported),
            (0x85, .bootloaderError),
            (0x86, .incorrectBootloader),
            (0x87, .applicationOverlapsAppLoader),
        ]
        for (code, error) in vectors {
            #expect(SiliconLabsOTAError(rawValue: code) == error, "0x\(String(code, radix: 16))")
            #expect(error.rawValue == code)
        }
    }

    /// The OTA service and characteristic UUIDs, as the Gecko SDK's NCP host
    /// example stores them: 16 bytes, little-endian.
    ///
    /// Source: Gecko SDK `app/bluetooth/example_host/ota_dfu/main.c` (mirrored in
    /// YuhangZho/ZigbeeSiliconV3 at ab0bd8d4bb6c1048adef81d0e66d96006c2fabd9),
    /// `uuid_ota_service`, `uuid_ota_control`, `uuid_ota_data`,
    /// `uuid_apploader_version`, `uuid_ota_version`, `uuid_bootloader_version`,
    /// `uuid_application_version`.
    @Test func otaServiceAndCharacteristicUUIDs() {
        #expect(
            SiliconLabsOTAChannel.service.littleEndian
                == [0xF0, 0x19, 0x21, 0xB4, 0x47, 0x8F, 0xA4, 0xBF, 0xA1, 0x4F, 0x63, 0xFD, 0xEE, 0xD6, 0x14, 0x1D])
        #expect(
            SiliconLabsOTAChannel.control.uuid.littleEndian
                == [0x63, 0x60, 0x32, 0xE0, 0x37, 0x5E, 0xA4, 0x88, 0x53, 0x4E, 0x6D, 0xFB, 0x64, 0x35, 0xBF, 0xF7])
        #expect(
            SiliconLabsOTAChannel.data.uuid.littleEndian
                == [0x53, 0xA1, 0x81, 0x1F, 0x58, 0x2C, 0xD0, 0xA5, 0x45, 0x40, 0xFC, 0x34, 0xF3, 0x27, 0x42, 0x98])
        #expect(
            SiliconLabsOTAChannel.apploaderVersion.uuid.littleEndian
                == [0x9F, 0x3E, 0xE2, 0x2E, 0x0E, 0xCF, 0xFF, 0xBF, 0x1E, 0x45, 0xCA, 0x8C, 0x68, 0x23, 0x4A, 0x4F])
        #expect(
            SiliconLabsOTAChannel.otaVersion.uuid.littleEndian
                == [0x16, 0x53, 0x1E, 0xC4, 0x4C, 0xBA, 0xAD, 0x9D, 0x32, 0x4B, 0x68, 0x08, 0xCF, 0x7B, 0xC0, 0x4C])
        #expect(
            SiliconLabsOTAChannel.bootloaderVersion.uuid.littleEndian
                == [0xFE, 0x5A, 0x24, 0xE1, 0x2B, 0xAA, 0xA5, 0xB2, 0xE9, 0x46, 0x17, 0xE9, 0x0A, 0x5C, 0xF0, 0x25])
        #expect(
            SiliconLabsOTAChannel.applicationVersion.uuid.littleEndian
                == [0xF8, 0x92, 0x7A, 0xAC, 0x96, 0xCD, 0xA9, 0xBF, 0xF2, 0x49, 0xC1, 0x4A, 0x11, 0xCC, 0x77, 0x0D])
    }

    /// GBL tag identifiers and header types.
    ///
    /// Source: SiliconLabs/gecko_sdk `platform/bootloader/parser/gbl/btl_gbl_format.h`
    /// at d4854d2ff06a828161d7032efb1736d0deda40b1: `GBL_TAG_ID_HEADER_V3`,
    /// `GBL_TAG_ID_BOOTLOADER`, `GBL_TAG_ID_APPLICATION`, `GBL_TAG_ID_METADATA`,
    /// `GBL_TAG_ID_PROG`, `GBL_TAG_ID_PROG_LZ4`, `GBL_TAG_ID_PROG_LZMA`,
    /// `GBL_TAG_ID_ERASEPROG`, `GBL_TAG_ID_END`, `GBL_TAG_ID_SE_UPGRADE`,
    /// `GBL_TAG_ID_ENC_HEADER`, `GBL_TAG_ID_ENC_INIT`, `GBL_TAG_ID_ENC_GBL_DATA`,
    /// `GBL_TAG_ID_SIGNATURE_ECDSA_P256`, `GBL_TAG_ID_CERTIFICATE_ECDSA_P256`;
    /// `GBL_COMPATIBILITY_MAJOR_VERSION 0x03000000`; `GBL_TYPE_ENCRYPTION_AESCCM
    /// 0x00000001`, `GBL_TYPE_SIGNATURE_ECDSA 0x00000100`.
    @Test func gblTagIdentifiers() {
        typealias Tag = GeckoBootloaderImage.Tag
        #expect(Tag.header.rawValue == 0x03A6_17EB)
        #expect(Tag.bootloader.rawValue == 0xF509_09F5)
        #expect(Tag.application.rawValue == 0xF40A_0AF4)
        #expect(Tag.metadata.rawValue == 0xF608_08F6)
        #expect(Tag.program.rawValue == 0xFE01_01FE)
        #expect(Tag.programLZ4.rawValue == 0xFD05_05FD)
        #expect(Tag.programLZMA.rawValue == 0xFD07_07FD)
        #expect(Tag.eraseThenProgram.rawValue == 0xFD03_03FD)
        #expect(Tag.end.rawValue == 0xFC04_04FC)
        #expect(Tag.secureElementUpgrade.rawValue == 0x5EA6_17EB)
        #expect(Tag.encryptionHeader.rawValue == 0xFB05_05FB)
        #expect(Tag.encryptionInit.rawValue == 0xFA06_06FA)
        #expect(Tag.encryptedData.rawValue == 0xF907_07F9)
        #expect(Tag.signature.rawValue == 0xF70A_0AF7)
        #expect(Tag.certificate.rawValue == 0xF30B_0BF3)
    }

    /// A minimal GBL file written tag by tag from the Gecko SDK's structs:
    /// `GblHeader_t` (tag 0x03A617EB, length 8, version 0x03000000, type
    /// `GBL_TYPE_NONE`), `GblApplication_t` (tag 0xF40A0AF4, length 28,
    /// `ApplicationData_t` { type 0x20 `APPLICATION_TYPE_BLUETOOTH_APP`,
    /// version 0x00010002, capabilities 0, productId 10…1F }), `GblProg_t`
    /// with the erase&program tag 0xFD0303FD (length 12: flash address
    /// 0x00004000, 8 data bytes), and `GblEnd_t` (tag 0xFC0404FC, length 4,
    /// `gblCrc`): CRC-32 (zlib's) of bytes 0…79, i.e. everything through the
    /// end tag's header, = 0xB982E381, stored little-endian. Over the whole file
    /// that CRC leaves 0x2144DF1C, the complement of the bootloader's residue
    /// `BTL_CRC32_END` 0xDEBB20E3, which `parser_finalize` checks.
    ///
    /// Sources: gecko_sdk `btl_gbl_format.h` at d4854d2ff06a828161d7032efb1736d0deda40b1
    /// (`GblTagHeader_t`, `GblHeader_t`, `GblApplication_t`, `GblProg_t`,
    /// `GblEnd_t`); `platform/bootloader/api/application_properties.h` at
    /// 9f9e63a28af6a5795d4456b767caf2adf6b4edd9 (`ApplicationData_t`,
    /// `APPLICATION_TYPE_BLUETOOTH_APP (1UL << 5UL)`);
    /// `platform/bootloader/parser/gbl/btl_gbl_parser.c` at
    /// 310814a9016b60a8012d50c62cc168a783ac102b, `parser_finalize` (`fileCrc !=
    /// BTL_CRC32_END` → `BOOTLOADER_ERROR_PARSER_CRC`); Gecko SDK `btl_crc32.h`
    /// (`BTL_CRC32_START 0xFFFFFFFF`, `BTL_CRC32_END 0xDEBB20E3`). Checked with
    /// the vendor's tool: Simplicity Commander 1v25p1b2000 `gbl parse` of these
    /// 84 bytes writes the application `:08400000DEADBEEF0102030476`.
    @Test func aMinimalGBLWrittenTagByTagIsAccepted() throws {
        let file = Self.minimalGBL
        #expect(file.count == 84)
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(image.formatVersion == 0x0300_0000)
        #expect(image.imageType == 0 && !image.isEncrypted && !image.isSigned)
        #expect(image.applicationVersion == 0x0001_0002)
        #expect(image.programs == [GeckoBootloaderImage.Program(address: 0x4000, length: 8)])
        #expect(image.length == 84)
        #expect(GeckoBootloaderImage.problem(file) == nil)
        // bleota's CRC-32 is the bootloader's: the whole file leaves ~BTL_CRC32_END.
        #expect(CRC32.checksum(file) == ~UInt32(0xDEBB_20E3))
        #expect(CRC32.checksum(file.prefix(80)) == 0xB982_E381)
    }

    /// The same file with its first program byte changed (0xDE → 0xDF at
    /// offset 64): the stored CRC no longer matches, which the bootloader
    /// reports as `BOOTLOADER_ERROR_PARSER_CRC` and the AppLoader as 0x80.
    /// Simplicity Commander 1v25p1b2000 refuses these bytes with "GBL File CRC
    /// error - expected 0xDEBB20E3, but got 0xBBDC1BA5".
    ///
    /// Sources: as `aMinimalGBLWrittenTagByTagIsAccepted`; `ErrorCodes.kt`
    /// (0x80 "CRC check failed").
    @Test func theSameGBLWithOneByteChangedIsRefused() {
        var damaged = Self.minimalGBL
        damaged[64] ^= 0x01
        let error = #expect(throws: DecodingError.self) { try GeckoBootloaderImage(decoding: damaged) }
        #expect(error?.field == "end tag CRC-32")
        #expect(error?.offset == 80)
        #expect(GeckoBootloaderImage.problem(damaged) != nil)
        // The stored CRC byte-swapped (big-endian) is refused too.
        var swapped = Self.minimalGBL
        swapped.replaceSubrange(80..<84, with: [0xB9, 0x82, 0xE3, 0x81])
        #expect(throws: DecodingError.self) { try GeckoBootloaderImage(decoding: swapped) }
    }

    /// A header whose type is `GBL_TYPE_SIGNATURE_ECDSA` (0x100), with a
    /// signature tag (`GblSignatureEcdsaP256_t`: tag 0xF70A0AF7, r‖s, 64
    /// bytes, zero here) before the end tag; CRC-32 of bytes 0…151 = 0x9C25E43D.
    ///
    /// Source: `btl_gbl_format.h` at d4854d2ff06a828161d7032efb1736d0deda40b1,
    /// `GBL_TYPE_SIGNATURE_ECDSA`, `GBL_TAG_ID_SIGNATURE_ECDSA_P256`,
    /// `GblSignatureEcdsaP256_t`. (Simplicity Commander 1v25p1b2000 `gbl parse`
    /// reads these 156 bytes.)
    @Test func theSignedTypeBit() throws {
        var file: [UInt8] = []
        file += [0xEB, 0x17, 0xA6, 0x03, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x01, 0x00, 0x00]
        file += Array(Self.minimalGBL[16..<72])  // the application and erase&program tags
        file += [0xF7, 0x0A, 0x0A, 0xF7, 0x40, 0x00, 0x00, 0x00]
        file += [UInt8](repeating: 0, count: 64)
        file += [0xFC, 0x04, 0x04, 0xFC, 0x04, 0x00, 0x00, 0x00, 0x3D, 0xE4, 0x25, 0x9C]
        #expect(file.count == 156)
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(image.imageType == 0x100)
        #expect(image.isSigned && !image.isEncrypted)
        #expect(image.applicationVersion == 0x0001_0002)
        #expect(image.length == 156)
    }

    /// `commander gbl create app.gbl --app silabs-app.hex` (Simplicity Commander
    /// 1v25p1b2000): header (version 0x03000000, type 0), application tag
    /// (type 0x20, version 7, from the image's `ApplicationProperties_t`), one
    /// erase&program tag (0xFD0303FD) at address 0 with the 132-byte image, end
    /// tag with CRC-32 0xA8D22A35. 208 bytes.
    ///
    /// Source: the vendor's tool, via `scripts/silabs-fixtures.sh`.
    @Test func commanderAppGBL() throws {
        let file = try Self.fixture("commander-1v25p1b2000-app.gbl")
        #expect(file.count == 208)
        #expect(Array(file.prefix(16)) == [0xEB, 0x17, 0xA6, 0x03, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00])
        #expect(Array(file.suffix(12)) == [0xFC, 0x04, 0x04, 0xFC, 0x04, 0x00, 0x00, 0x00, 0x35, 0x2A, 0xD2, 0xA8])
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(image.formatVersion == 0x0300_0000 && image.imageType == 0)
        #expect(image.applicationVersion == 7)
        #expect(image.programs == [GeckoBootloaderImage.Program(address: 0, length: 132)])
        #expect(image.length == 208)
        #expect(GeckoBootloaderImage.problem(file) == nil)
        // The program data is the image: its vector table starts at file offset 64.
        #expect(Array(file[64..<72]) == [0x00, 0x10, 0x00, 0x20, 0x81, 0x00, 0x00, 0x00])
    }

    /// `--compress lzma`: the program data in an LZMA program tag
    /// (0xFD0707FD, `GBL_TAG_ID_PROG_LZMA`). 160 bytes, no padding.
    ///
    /// Source: Simplicity Commander 1v25p1b2000 via `scripts/silabs-fixtures.sh`;
    /// `btl_gbl_format.h` at d4854d2ff06a828161d7032efb1736d0deda40b1.
    @Test func commanderLZMAGBL() throws {
        let file = try Self.fixture("commander-1v25p1b2000-app-lzma.gbl")
        #expect(Array(file[52..<56]) == [0xFD, 0x07, 0x07, 0xFD])
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(image.applicationVersion == 7)
        #expect(image.length == 160 && file.count == 160)
        #expect(GeckoBootloaderImage.problem(file) == nil)
    }

    /// `--compress lz4`: an LZ4 program tag (0xFD0505FD), and the file padded
    /// with two 0xFF bytes after the end tag to a multiple of 4 (148 bytes; the
    /// end tag ends at 146). The Gecko bootloader's parser stops at the end tag
    /// and ignores what follows (`parser_parse`: after `parser_finalize` the
    /// state is `GblParserStateDone`, which returns `BOOTLOADER_ERROR_PARSER_EOF`
    /// for further input), so a file the vendor's tool made this way is one a
    /// device takes.
    ///
    /// Sources: Simplicity Commander 1v25p1b2000 via `scripts/silabs-fixtures.sh`;
    /// gecko_sdk `btl_gbl_parser.c` at 310814a9016b60a8012d50c62cc168a783ac102b,
    /// `parser_parse`, `parser_finalize`.
    ///
    /// bleota refused this file ("2 bytes follow the end tag") until this test.
    @Test func commanderLZ4GBLIsPaddedAfterItsEndTag() throws {
        let file = try Self.fixture("commander-1v25p1b2000-app-lz4.gbl")
        #expect(file.count == 148)
        #expect(Array(file[52..<56]) == [0xFD, 0x05, 0x05, 0xFD])
        #expect(Array(file.suffix(2)) == [0xFF, 0xFF])
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(image.applicationVersion == 7)
        #expect(image.length == 146)
        #expect(GeckoBootloaderImage.problem(file) == nil, "Commander's own padding after the end tag")
    }

    /// `--dep-app geq:5`: a version dependency tag (0x76A617EB,
    /// `GBL_TAG_ID_VERSION_DEPENDENCY`; `VersionDependency_t` { imageType 1
    /// application, statement 0x06 GEQ, reserved, version 5 }) right after the
    /// header. 224 bytes; everything else as in the plain file.
    ///
    /// Sources: Simplicity Commander 1v25p1b2000 via `scripts/silabs-fixtures.sh`;
    /// gecko_sdk `btl_gbl_format.h` at d4854d2ff06a828161d7032efb1736d0deda40b1,
    /// `GBL_TAG_ID_VERSION_DEPENDENCY 0x76A617EBUL`, `VersionDependency_t`,
    /// `GBL_VERSION_DEPENDENCY_TYPE_APPLICATION`, `GBL_VERSION_DEPENDENCY_OPERATOR_GEQ`,
    /// `GBL_TAG_ORDER_VERSION_DEPENDENCY`.
    ///
    /// bleota's reader threw "0x76a617eb is no GBL tag" until this test.
    @Test func commanderGBLWithAVersionDependencyTag() throws {
        let file = try Self.fixture("commander-1v25p1b2000-app-dep-geq5.gbl")
        #expect(file.count == 224)
        #expect(Array(file[16..<32]) == [0xEB, 0x17, 0xA6, 0x76, 0x08, 0x00, 0x00, 0x00, 0x01, 0x06, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00])
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(image.applicationVersion == 7)
        #expect(image.programs == [GeckoBootloaderImage.Program(address: 0, length: 132)])
        #expect(image.length == 224)
        #expect(GeckoBootloaderImage.problem(file) == nil)
    }

    /// `--encrypt KEY`: header type 1 (`GBL_TYPE_ENCRYPTION_AESCCM`), an
    /// encryption init tag (0xFA0606FA, `GblEncryptionInitAesCcm_t`: msgLen,
    /// 12-byte nonce) and encrypted data tags (0xF90707F9) that hold the
    /// application and program tags, then the end tag. 248 bytes. The
    /// application tag is inside the ciphertext, so the file says nothing about
    /// the application in the clear: why bleota cannot send it is that it is
    /// encrypted.
    ///
    /// Sources: Simplicity Commander 1v25p1b2000 via `scripts/silabs-fixtures.sh`
    /// (a random key and nonce); gecko_sdk `btl_gbl_format.h` at
    /// d4854d2ff06a828161d7032efb1736d0deda40b1, `GBL_TYPE_ENCRYPTION_AESCCM`,
    /// `GblEncryptionInitAesCcm_t`, `GblEncryptionData_t` ("After decryption,
    /// this data must represent one or more complete unencrypted GBL tags").
    ///
    /// bleota answered "it carries no application tag (a bootloader-only GBL)",
    /// before it looked at the type bit, until this test.
    @Test func commanderEncryptedGBL() throws {
        let file = try Self.fixture("commander-1v25p1b2000-app-encrypted.gbl")
        #expect(file.count == 248)
        #expect(Array(file[16..<24]) == [0xFA, 0x06, 0x06, 0xFA, 0x10, 0x00, 0x00, 0x00])
        #expect(Array(file[40..<44]) == [0xF9, 0x07, 0x07, 0xF9])
        let image = try GeckoBootloaderImage(decoding: file)
        #expect(image.imageType == 1 && image.isEncrypted && !image.isSigned)
        #expect(image.length == 248)
        let problem = try #require(GeckoBootloaderImage.problem(file))
        #expect(problem.contains("encrypted"), "\(problem)")
    }

    // MARK: - Helpers

    /// The GBL of `aMinimalGBLWrittenTagByTagIsAccepted`, tag by tag.
    static let minimalGBL: [UInt8] = {
        var file: [UInt8] = []
        // GblHeader_t: tag 0x03A617EB, length 8, version 0x03000000, type 0.
        file += [0xEB, 0x17, 0xA6, 0x03, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00]
        // GblApplication_t: tag 0xF40A0AF4, length 28; type 0x20, version 0x00010002, capabilities 0.
        file += [0xF4, 0x0A, 0x0A, 0xF4, 0x1C, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00]
        // ApplicationData_t.productId.
        file += [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F]
        // GblProg_t (erase&program): tag 0xFD0303FD, length 12, flashStartAddress 0x00004000, data.
        file += [0xFD, 0x03, 0x03, 0xFD, 0x0C, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00]
        file += [0xDE, 0xAD, 0xBE, 0xEF, 0x01, 0x02, 0x03, 0x04]
        // GblEnd_t: tag 0xFC0404FC, length 4, gblCrc 0xB982E381.
        file += [0xFC, 0x04, 0x04, 0xFC, 0x04, 0x00, 0x00, 0x00, 0x81, 0xE3, 0x82, 0xB9]
        return file
    }()

    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/silabs")

    static func fixture(_ name: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: fixtures.appendingPathComponent(name)))
    }
}
