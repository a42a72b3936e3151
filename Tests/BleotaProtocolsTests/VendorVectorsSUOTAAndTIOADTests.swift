import BleotaATT
import BleotaCodec
import BleotaEngine
import Testing

@testable import BleotaProtocols

// Third-party vectors for Dialog/Renesas SUOTA and TI OAD (issue 30, item 7).
//
// Neither vendor publishes its image tool on PyPI or Debian (Dialog's mkimage
// and TI's oad_image_tool ship only inside their SDKs), so every byte below is
// written out by hand from the vendors' published sources, field by field,
// with the field's offset and the vendor's name for it. Nothing is encoded
// with bleota first and compared with itself. Sources, read and not copied:
//
// - [DLG10] dialog-semiconductor/BLE_SDK10_examples, commit
//   64b736968b799ed8f1c67488be2b82a8049e88f6 (DA1469x SDK10 examples):
//   features/suouart/src/dlg_suouart.c (Renesas' SUOTA state machine over
//   UART, "as defined by Dialog SUOTA specification"),
//   features/suouart/suouart_host/host_usb_updater.c (Dialog's own host for
//   it), features/suouart/suouart_host/pxp_reporter.1.0.0.1.img (an image
//   mkimage made, published beside them), and two SUOTA configurations.
// - [OT] openthread/openthread, commit 91adb61a07e04e90af1be306649aa56e063e1984:
//   third_party/dialog/DialogSDK/bsp/include/suota.h (Dialog's DA1468x SDK
//   header, BSD-licensed).
// - [TI] TexasInstruments/simplelink-lowpower-f2-sdk, commit
//   5b31d0a4903351e544546e23ef3330eaa4291ceb: source/ti/ble5stack/profiles/oad/cc26xx/oad.h
//   and oad.c, oad_image_header_app.c beside them,
//   source/ti/common/cc26xx/oad/oad_image_header.h, source/ti/ble5stack/inc/bcomdef.h,
//   tools/common/oad/imgBinUtil.py and computeCRC32.py (TI's image tool).

// MARK: - Dialog/Renesas SUOTA

@Suite struct VendorVectorsSUOTATests {
    /// SERV_STATUS values by name. [DLG10] dlg_suouart.c lines 67–87,
    /// `suouart_status_t` ("As defined by Dialog SUOTA specification"; the
    /// SDK's BLE service uses the same numbers under SUOTAR_ names).
    @Test func statusValuesAreTheVendors() {
        let table: [(SUOTAStatus, UInt8, String)] = [
            (.serviceStarted, 0x01, "SRV_STARTED"),
            (.completeOK, 0x02, "CMP_OK"),
            (.serviceExit, 0x03, "SRV_EXIT"),
            (.crcError, 0x04, "CRC_ERR"),
            (.patchLengthError, 0x05, "PATCH_LEN_ERR"),
            (.externalMemoryWriteError, 0x06, "EXT_MEM_WRITE_ERR"),
            (.internalMemoryError, 0x07, "INT_MEM_ERR"),
            (.invalidMemoryType, 0x08, "INVAL_MEM_TYPE"),
            (.applicationError, 0x09, "APP_ERROR"),
            (.imageStarted, 0x10, "IMG_STARTED"),
            (.invalidImageBank, 0x11, "INVAL_IMG_BANK"),
            (.invalidImageHeader, 0x12, "INVAL_IMG_HDR"),
            (.invalidImageSize, 0x13, "INVAL_IMG_SIZE"),
            (.invalidProductHeader, 0x14, "INVAL_PRODUCT_HDR"),
            (.sameImage, 0x15, "SAME_IMG_ERR"),
            (.externalMemoryReadError, 0x16, "EXT_MEM_READ_ERR"),
        ]
        for (status, value, name) in table {
            #expect(status.rawValue == value, "SUOUART_\(name)")
            #expect(SUOTAStatus(rawValue: value) == status, "SUOUART_\(name)")
            #expect(SUOTAStatus.name(value).hasPrefix(name + " "), "0x\(String(value, radix: 16)) is SUOUART_\(name)")
        }
        // "Value zero must not be used !! Notifications are sent when status changes." (line 68)
        #expect(SUOTAStatus(rawValue: 0x00) == nil)
    }

    /// MEM_DEV as Dialog's own host writes it. [DLG10] host_usb_updater.c
    /// lines 874–896: "Byte 3 … 0x13: Image is stored in SPI FLASH … 0xFD
    /// reboot … 0xFE end … 0xFF abort", "Byte 0 … the image bank", and the
    /// strings "00000013", "000000FD", "000000FE", "000000FF" sent "LSB first"
    /// (line 892). The receiver reads them little-endian and takes the command
    /// from the top byte: dlg_suouart.c `suouart_get_u32` (lines 262–265) and
    /// `cmd = suouart_get_u32(value) >> 24` (line 722); the memory types are
    /// `suouart_commands_t` (lines 126–146).
    @Test func memoryDeviceValuesAreTheHostsBytes() {
        #expect(SUOTAMemoryCommand.spiFlash(bank: 0).encode() == [0x00, 0x00, 0x00, 0x13])
        #expect(SUOTAMemoryCommand.reboot.encode() == [0x00, 0x00, 0x00, 0xFD])
        #expect(SUOTAMemoryCommand.end.encode() == [0x00, 0x00, 0x00, 0xFE])
        #expect(SUOTAMemoryCommand.abort.encode() == [0x00, 0x00, 0x00, 0xFF])
        // Byte 0 is the bank: 0x00 the oldest, 0x01 image #1, 0x02 image #2.
        #expect(SUOTAMemoryCommand.spiFlash(bank: 1).encode() == [0x01, 0x00, 0x00, 0x13])

        #expect(command([0x00, 0x00, 0x00, 0x13]) == SUOTAMemoryCommand.spiFlash(bank: 0))
        #expect(command([0x02, 0x00, 0x00, 0x13]) == SUOTAMemoryCommand.spiFlash(bank: 2))
        #expect(command([0x00, 0x00, 0x00, 0xFD]) == SUOTAMemoryCommand.reboot)
        #expect(command([0x00, 0x00, 0x00, 0xFE]) == SUOTAMemoryCommand.end)
        #expect(command([0x00, 0x00, 0x00, 0xFF]) == SUOTAMemoryCommand.abort)
        // SUOUART_IMG_INT_SYSRAM 0x10, _INT_RETRAM 0x11, _I2C_EEPROM 0x12: not an image to SPI flash.
        for memoryType: UInt8 in [0x10, 0x11, 0x12] {
            #expect(command([0x00, 0x00, 0x00, memoryType]) == SUOTAMemoryCommand.other(UInt32(memoryType) << 24))
        }
    }

    /// A MEM_DEV write as the receiver decodes it.
    func command(_ bytes: [UInt8]) -> SUOTAMemoryCommand? {
        SUOTAWire.read(bytes).map { SUOTAMemoryCommand(value: $0) }
    }

    /// PATCH_LEN is a u16, low byte first: [DLG10] host_usb_updater.c line 954,
    /// `"SUOUART_PATCH_LEN 0 2 %02x%02x\n", (chunksz & 0xFF), ((chunksz >> 8) & 0xFF)`.
    /// Counts read back (MEM_INFO) are u32 little-endian like every value the
    /// receiver takes (`suouart_get_u32`, dlg_suouart.c lines 262–265).
    @Test func patchLengthAndCountsAreLittleEndian() {
        #expect(SUOTAWire.u16(0x01F4) == [0xF4, 0x01])
        #expect(SUOTAWire.u16(0x0200) == [0x00, 0x02])
        let counted: [UInt8] = [0x34, 0x60, 0x04, 0x00]
        #expect(SUOTAWire.read(counted) == 286_772)
        #expect(SUOTAWire.u32(286_772) == [0x34, 0x60, 0x04, 0x00])
    }

    /// The service and the PSM. [DLG10] features/dsps_ble_peripheral/dsps_ble_peripheral_task.c
    /// line 693 advertises `0x03, GAP_DATA_TYPE_UUID16_LIST, 0xF5, 0xFE, // = 0xFEF5 (DIALOG SUOTA UUID)`;
    /// connectivity/pxp_reporter_makefile/config/custom_config_qspi_suota.h lines 121–122:
    /// `SUOTA_VERSION ( SUOTA_VERSION_1_3 )`, `SUOTA_PSM ( 0x81 )`.
    @Test func serviceUUIDAndPSMAreTheSDKs() {
        #expect(SUOTAChannel.service.littleEndian == [0xF5, 0xFE])
        #expect(SUOTAChannel.defaultPSM == 0x81)
    }

    /// The first 42 bytes of the image Renesas publishes beside its SUOTA host:
    /// [DLG10] features/suouart/suouart_host/pxp_reporter.1.0.0.1.img (287 796
    /// bytes; last changed in commit 13008ab9c5be4bc88beb1010c4175836f2377bf4),
    /// transcribed byte for byte. The layout is
    /// `suota_1_1_image_header_da1469x_t` as dlg_suouart.c reads it (lines
    /// 480–535: `image_identifier`, `size`, `crc`, `version_string`,
    /// `timestamp`, `pointer_to_ivt`, packed, little-endian), 34 bytes, then
    /// mkimage's header extension up to `pointer_to_ivt`.
    static let publishedHeader: [UInt8] = [
        0x51, 0x71,  // 0  image_identifier: SUOTA_1_1_IMAGE_DA1469x_HEADER_SIGNATURE_B1/B2, "Qq"
        0x34, 0x60, 0x04, 0x00,  // 2  size: 286 772 bytes of code
        0x24, 0x5B, 0x89, 0x3B,  // 6  crc: 0x3B895B24
        0x31, 0x2E, 0x30, 0x2E, 0x30, 0x2E, 0x31, 0x00,  // 10 version_string[16]: "1.0.0.1", NUL-padded
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x48, 0x90, 0x87, 0x63,  // 26 timestamp: 1 669 828 680 (2022-11-30 17:18:00 UTC)
        0x00, 0x04, 0x00, 0x00,  // 30 pointer_to_ivt: 0x400
        // 34 the header extension as mkimage wrote it: two u16 tags (0x22AA, 0x44AA), each with a u16 length of 0.
        0xAA, 0x22, 0x00, 0x00, 0xAA, 0x44, 0x00, 0x00,
    ]

    /// bleota reads Renesas' own image header to the fields mkimage wrote.
    /// (When this test was written the CRC-32 was checked with zlib over the
    /// published file's 286 772 bytes from 0x400: 0x3B895B24, the header's. The
    /// firmware itself is not reproduced here.)
    @Test func thePublishedImageHeaderDecodes() throws {
        let header = try SUOTAImageHeader(decoding: Self.publishedHeader)
        #expect(header.codeSize == 286_772)
        #expect(header.crc == 0x3B89_5B24)
        #expect(header.version == "1.0.0.1")
        #expect(header.timestamp == 1_669_828_680)
        #expect(header.codeOffset == 0x400)
        #expect(SUOTAImageHeader.size == 34)
        #expect(SUOTAImageHeader.signature == [0x51, 0x71])
        // Only the header: the code the header announces is missing (the receiver waits for `size`
        // bytes after `pointer_to_ivt`, dlg_suouart.c `suouart_state_w4_image_data`).
        let problem = SUOTAImageHeader.problem(Self.publishedHeader)
        #expect(problem?.contains("286772 bytes of code from offset 1024") == true, "\(problem ?? "nil")")
    }

    /// A small DA1469x image built field by field to the same struct, with the
    /// published image's header extension and 16 bytes of code of this test's
    /// own. CRC: [DLG10] dlg_suouart.c starts at 0xFFFFFFFF (line 747), runs
    /// the reflected 0xEDB88320 table (`crc32_tab`, line 201;
    /// `suouart_update_crc`, lines 249–255) over the image data only (state
    /// W4_IMAGE_DATA, line 591, after header and extension) and inverts at END
    /// (line 759): zlib's CRC-32. The value below was computed with Python's
    /// `zlib.crc32` of those 16 bytes.
    static let code: [UInt8] = [0x00, 0x80, 0x00, 0x20, 0x45, 0x04, 0x00, 0x00, 0x4D, 0x04, 0x00, 0x00, 0x4F, 0x04, 0x00, 0x00]
    static let builtHeader: [UInt8] = [
        0x51, 0x71,  // 0  image_identifier "Qq"
        0x10, 0x00, 0x00, 0x00,  // 2  size: 16
        0xE1, 0x50, 0xF2, 0x8B,  // 6  crc: 0x8BF250E1 (zlib.crc32 of the code)
        0x31, 0x2E, 0x30, 0x2E, 0x30, 0x2E, 0x32, 0x00,  // 10 version_string: "1.0.0.2"
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0xF1, 0x53, 0x65,  // 26 timestamp: 1 700 000 000
        0x00, 0x04, 0x00, 0x00,  // 30 pointer_to_ivt: 0x400
    ]
    static var builtImage: [UInt8] {
        builtHeader + [0xAA, 0x22, 0x00, 0x00, 0xAA, 0x44, 0x00, 0x00]
            + [UInt8](repeating: 0xFF, count: 0x400 - 42) + code
    }

    @Test func aBuiltImageIsReadAndItsCRCIsTheCodes() throws {
        let image = Self.builtImage
        #expect(image.count == 0x410)
        #expect(CRC32.checksum(Self.code) == 0x8BF2_50E1)
        // The CRC-32 both vendors use (Dialog's table above; TI's computeCRC32.py is zlib.crc32):
        // the catalogue's check value for "123456789".
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        let header = try SUOTAImageHeader(decoding: image)
        #expect(header.codeSize == 16 && header.crc == 0x8BF2_50E1 && header.version == "1.0.0.2")
        #expect(header.timestamp == 1_700_000_000 && header.codeOffset == 0x400)
        #expect(SUOTAImageHeader.problem(image) == nil)

        // The CRC covers the code only: a changed version string or extension still verifies on the chip.
        var version = image
        version[16] = 0x33  // "1.0.0.3"
        #expect(SUOTAImageHeader.problem(version) == nil)
        var extensionByte = image
        extensionByte[35] ^= 0x01
        #expect(SUOTAImageHeader.problem(extensionByte) == nil)
        // A changed byte of code: END answers SUOUART_CRC_ERR (dlg_suouart.c lines 758–761).
        var code = image
        code[0x405] ^= 0x01
        #expect(SUOTAImageHeader.problem(code) == "the CRC-32 of the code does not match the header's")
        // Fewer bytes than `pointer_to_ivt + size`: the download never reaches SUOUART_STATE_DONE.
        let short = Array(image.dropLast())
        #expect(SUOTAImageHeader.problem(short)?.contains("16 bytes of code from offset 1024") == true)
    }

    /// bleota's encoder lays its sample header at the struct's offsets: the
    /// first 34 bytes are the ones built by hand above, the code follows at
    /// `pointer_to_ivt`.
    @Test func theSampleEncoderWritesTheVendorsLayout() {
        let sample = SUOTAImageHeader.sample(Self.code, version: "1.0.0.2", timestamp: 1_700_000_000)
        #expect(Array(sample.prefix(34)) == Self.builtHeader)
        #expect(sample.count == 0x400 + 16)
        #expect(Array(sample.suffix(16)) == Self.code)
    }

    /// Refused: a DA1468x image. Its header is `suota_1_1_image_header_t`
    /// ([OT] suota.h: `signature[2]`, `flags` u16, `code_size`, `crc`,
    /// `version[16]`, `timestamp`, `exec_location`; signature
    /// SUOTA_1_1_IMAGE_HEADER_SIGNATURE_B1/B2 = 0x70, 0x61), not the DA1469x's
    /// "Qq"; a DA1469x answers it SUOUART_INVAL_IMG_HDR ([DLG10]
    /// dlg_suouart.c `suouart_validate_img_hdr`, lines 480–486 and 510–512).
    /// bleota refuses it before connecting, naming the signature.
    @Test func aDA1468xHeaderIsRefused() {
        let da1468x: [UInt8] = [
            0x70, 0x61,  // 0  signature "pa"
            0x00, 0x00,  // 2  flags
            0x00, 0x10, 0x00, 0x00,  // 4  code_size: 4096
            0x78, 0x56, 0x34, 0x12,  // 8  crc
            0x31, 0x2E, 0x30, 0x2E, 0x30, 0x00, 0x00, 0x00,  // 12 version[16]: "1.0.0"
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0xF1, 0x53, 0x65,  // 28 timestamp
            0x24, 0x00, 0x00, 0x00,  // 32 exec_location
        ]
        #expect(da1468x.count == 36)
        do throws(SUOTAImageError) {
            _ = try SUOTAImageHeader(decoding: da1468x)
            Issue.record("a DA1468x header was read as a DA1469x one")
        } catch {
            #expect(error.description.hasPrefix("signature at offset 0 is 70 61"), "\(error.description)")
            #expect(error.description.contains("a DA1468x image, which bleota does not read"), "named for what it is: \(error.description)")
        }
        #expect(SUOTAImageHeader.problem(da1468x) != nil)
    }
}

// MARK: - TI OAD (SimpleLink BLE5-Stack, off-chip)

@Suite struct VendorVectorsTIOADTests {
    /// Status codes by name. [TI] oad.h, `OAD_STATUS_CODES` (OAD_SUCCESS 0 …
    /// OAD_IMG_ID_TIMEOUT 16).
    @Test func statusCodesAreTheProfiles() {
        let table: [(TIOADStatus, UInt8, String)] = [
            (.success, 0, "OAD_SUCCESS"),
            (.crcError, 1, "OAD_CRC_ERR"),
            (.flashError, 2, "OAD_FLASH_ERR"),
            (.bufferOverflow, 3, "OAD_BUFFER_OFL"),
            (.alreadyStarted, 4, "OAD_ALREADY_STARTED"),
            (.notStarted, 5, "OAD_NOT_STARTED"),
            (.downloadNotComplete, 6, "OAD_DL_NOT_COMPLETE"),
            (.noResources, 7, "OAD_NO_RESOURCES"),
            (.imageTooBig, 8, "OAD_IMAGE_TOO_BIG"),
            (.incompatibleImage, 9, "OAD_INCOMPATIBLE_IMAGE"),
            (.invalidFile, 10, "OAD_INVALID_FILE"),
            (.incompatibleFile, 11, "OAD_INCOMPATIBLE_FILE"),
            (.authenticationFailed, 12, "OAD_AUTH_FAIL"),
            (.extensionNotSupported, 13, "OAD_EXT_NOT_SUPPORTED"),
            (.downloadComplete, 14, "OAD_DL_COMPLETE"),
            (.cccdNotEnabled, 15, "OAD_CCCD_NOT_ENABLED"),
            (.identifyTimeout, 16, "OAD_IMG_ID_TIMEOUT"),
        ]
        for (status, value, name) in table {
            #expect(status.rawValue == value, "\(name)")
            #expect(TIOADStatus(rawValue: value) == status, "\(name)")
            #expect(TIOADStatus.name(value).hasPrefix(name + " "), "\(value) is \(name)")
        }
    }

    /// Extended Control op-codes. [TI] oad.h, `OAD_EXT_CTRL_OPCODES` and
    /// `OAD_EXT_CTRL_CMD_NOT_SUPPORTED` (0xFF, the one-byte answer to an
    /// unknown op-code: oad.c `oadProcessExtControlCmd`, `default:`).
    @Test func extendedControlOpcodesAreTheProfiles() {
        let table: [(TIOADCommand, UInt8, String)] = [
            (.getBlockSize, 0x01, "OAD_EXT_CTRL_GET_BLK_SZ"),
            (.startOAD, 0x03, "OAD_EXT_CTRL_START_OAD"),
            (.enableImage, 0x04, "OAD_EXT_CTRL_ENABLE_IMG"),
            (.cancelOAD, 0x05, "OAD_EXT_CTRL_CANCEL_OAD"),
            (.getSoftwareVersion, 0x07, "OAD_EXT_CTRL_GET_SW_VER"),
            (.getDeviceType, 0x10, "OAD_EXT_CTRL_GET_DEV_TYPE"),
            (.blockRequest, 0x12, "OAD_EXT_CTRL_BLK_RSP_NOTIF"),
        ]
        for (command, value, name) in table {
            #expect(command.rawValue == value, "\(name)")
            #expect(TIOADCommand(rawValue: value) == command, "\(name)")
        }
        #expect(TIOADCommand.notSupported == 0xFF)
    }

    /// The service and its characteristics on the wire: [TI] bcomdef.h
    /// `TI_BASE_UUID_128(uuid)` = `0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    /// 0xB0, 0x00, 0x40, 0x51, 0x04, LO_UINT16(uuid), HI_UINT16(uuid), 0x00,
    /// 0xF0` ("F000XXXX-0451-4000-B000-000000000000"), with oad.h
    /// `OAD_SERVICE_UUID` 0xFFC0, `OAD_IMG_IDENTIFY_UUID` 0xFFC1,
    /// `OAD_IMG_BLOCK_UUID` 0xFFC2, `OAD_EXT_CTRL_UUID` 0xFFC5.
    @Test func uuidsAreTheTIBaseWithTheProfilesShortIDs() {
        func tiBase(_ short: UInt16) -> [UInt8] {
            [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xB0, 0x00, 0x40, 0x51, 0x04, UInt8(short & 0xFF), UInt8(short >> 8), 0x00, 0xF0]
        }
        #expect(TIOADChannel.service.littleEndian == tiBase(0xFFC0))
        #expect(TIOADChannel.identify.uuid.littleEndian == tiBase(0xFFC1))
        #expect(TIOADChannel.block.uuid.littleEndian == tiBase(0xFFC2))
        #expect(TIOADChannel.control.uuid.littleEndian == tiBase(0xFFC5))
    }

    /// Block requests. [TI] oad.h `blockReqPld_t` (packed: `cmdID` u8,
    /// `prevBlkStat` u8, `requestedBlk` u32, little-endian on the CC26xx) as
    /// oad.c `oadGetNextBlockReq` fills it: Start OAD asks for block 0 with
    /// OAD_SUCCESS; after the last block `oadBlkNum` is set to 0 before
    /// OAD_DL_COMPLETE is returned, so that notification names block 0; a block
    /// of the wrong number or size (`oadImgBlockWrite`) resets `oadBlkNum` to 0
    /// and answers OAD_BUFFER_OFL.
    @Test func blockRequestsAreTheProfilesPayload() {
        let first: [UInt8] = [0x12, 0x00, 0x00, 0x00, 0x00, 0x00]
        #expect(TIOADBlockRequest(status: 0, block: 0).encode() == first)
        #expect(TIOADBlockRequest(decoding: first[...]) == TIOADBlockRequest(status: 0, block: 0))

        let block258: [UInt8] = [0x12, 0x00, 0x02, 0x01, 0x00, 0x00]
        #expect(TIOADBlockRequest(status: TIOADStatus.success.rawValue, block: 0x0102).encode() == block258)
        #expect(TIOADBlockRequest(decoding: block258[...])?.block == 258)

        let complete: [UInt8] = [0x12, 0x0E, 0x00, 0x00, 0x00, 0x00]
        let decoded = TIOADBlockRequest(decoding: complete[...])
        #expect(decoded?.status == TIOADStatus.downloadComplete.rawValue && decoded?.block == 0)

        let overflow: [UInt8] = [0x12, 0x03, 0x00, 0x00, 0x00, 0x00]
        #expect(TIOADBlockRequest(decoding: overflow[...])?.status == TIOADStatus.bufferOverflow.rawValue)

        // Not block requests: `genericExtCtrlRsp_t` for a Start OAD outside OAD_CONFIG
        // (`03 05`, OAD_NOT_STARTED), the unknown-op-code answer, a truncated payload.
        let startRefused: [UInt8] = [0x03, 0x05]
        let notSupported: [UInt8] = [0xFF]
        let truncated: [UInt8] = [0x12, 0x00, 0x00, 0x00, 0x00]
        #expect(TIOADBlockRequest(decoding: startRefused[...]) == nil)
        #expect(TIOADBlockRequest(decoding: notSupported[...]) == nil)
        #expect(TIOADBlockRequest(decoding: truncated[...]) == nil)
    }

    /// An image block starts with its number, little-endian: [TI] oad.c
    /// `oadImgBlockWrite`, `BUILD_UINT32(pValue[0], pValue[1], pValue[2],
    /// pValue[3])`, then `OAD_BLK_NUM_HDR_SZ` (4) bytes in the image data.
    @Test func blockNumbersAreLittleEndian() {
        #expect(TIOADWire.u32(0x0102) == [0x02, 0x01, 0x00, 0x00])
        let number: [UInt8] = [0x02, 0x01, 0x00, 0x00]
        #expect(TIOADWire.read(number[...]) == 0x0102)
    }

    /// A whole off-chip OAD image, built field by field. Layout: [TI]
    /// oad_image_header.h `imgFixedHdr_t` (packed, 44 bytes) and
    /// `imgPayloadSeg_t` (12 bytes); offsets also in imgBinUtil.py
    /// (`FIXED_CRC_ADDR` 8, `FIXED_IMAGE_TYPE_ADDR` 18, `BIN_LEN_PTR` 24,
    /// `IMG_END_ADDR_PTR` 36, `FIXED_HDR_LEN` 44). Values: the BLE5-Stack
    /// application header, oad_image_header_app.c `_imgHdr` (clang branch, a
    /// STACK_LIBRARY build: imgType OAD_IMG_TYPE_APPSTACKLIB, imgNo 1, softVer
    /// "0001", hdrLen `offsetof(rfu) + sizeof(rfu)` = 44, rfu 0xFFFF), and
    /// what oad_image_tool fills in (imgBinUtil.py `updateImgLen`: len =
    /// imgEndAddr − startAddr + 1, segment length = len − 44; computeCRC32.py:
    /// `zlib.crc32` from `CRC_DATA_START_ADDR` 12 to the end, written at 8).
    /// The CRC below was computed with Python's `zlib.crc32(image[12:])`.
    static let image: [UInt8] = [
        0x43, 0x43, 0x32, 0x36, 0x78, 0x32, 0x52, 0x31,  // 0  imgID: OAD_IMG_ID_VAL for DeviceFamily_CC26X2, "CC26x2R1"
        0x8B, 0xB7, 0x41, 0x02,  // 8  crc32: 0x0241B78B
        0x03,  // 12 bimVer: BIM_VER
        0x01,  // 13 metaVer: META_VER
        0xFE, 0xFF,  // 14 techType: OAD_WIRELESS_TECH_BLE 0xFFFE
        0xFF,  // 16 imgCpStat: DEFAULT_STATE
        0xFF,  // 17 crcStat: DEFAULT_STATE
        0x07,  // 18 imgType: OAD_IMG_TYPE_APPSTACKLIB
        0x01,  // 19 imgNo
        0xFF, 0xFF, 0xFF, 0xFF,  // 20 imgVld
        0x48, 0x00, 0x00, 0x00,  // 24 len: 72, the whole file
        0x38, 0x00, 0x00, 0x00,  // 28 prgEntry (this test's: just past the header)
        0x30, 0x30, 0x30, 0x31,  // 32 softVer: SOFTWARE_VER "0001"
        0x47, 0x00, 0x00, 0x00,  // 36 imgEndAddr: startAddr + len − 1
        0x2C, 0x00,  // 40 hdrLen: 44
        0xFF, 0xFF,  // 42 rfu
        0x01,  // 44 segTypeImg: IMG_PAYLOAD_SEG_ID
        0xFE, 0xFF,  // 45 wirelessTech: OAD_WIRELESS_TECH_BLE
        0xFF,  // 47 rfu: DEFAULT_STATE
        0x1C, 0x00, 0x00, 0x00,  // 48 imgSegLen: len − FIXED_HDR_LEN = 28
        0x00, 0x00, 0x00, 0x00,  // 52 startAddr: 0, page-aligned (oad.c `oadValidateCandidateHdr`)
        // 56 the code (this test's own 16 bytes)
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F,
    ]

    @Test func aBuiltImageDecodesToTheHeadersFields() throws {
        let image = Self.image
        #expect(image.count == 72)
        #expect(CRC32.checksum(image[12...]) == 0x0241_B78B)
        let header = try TIOADImageHeader(decoding: image)
        #expect(header.imageID == Array("CC26x2R1".utf8))
        #expect(header.crc == 0x0241_B78B)
        #expect(header.bimVersion == 3 && header.metadataVersion == 1)
        #expect(header.imageType == 7 && header.imageNumber == 1)
        #expect(header.length == 72)
        #expect(header.softwareVersion == Array("0001".utf8))
        #expect(TIOADImageHeader.size == 44)
        #expect(TIOADImageHeader.cc26x2 == Array("CC26x2R1".utf8))
        #expect(TIOADImageHeader.bimVersion == 0x3 && TIOADImageHeader.metadataVersion == 0x1)
        #expect(TIOADImageHeader.problem(image) == nil)
    }

    /// Image Identify: [TI] oad.h `imgIdentifyPld_t` (packed, 22 bytes):
    /// imgID[8], bimVer, metaVer, imgCpStat, crcStat, imgType, imgNo, len
    /// (u32), softVer[4] — the header's fields without crc32, techType, imgVld,
    /// prgEntry. oad.c `oadCheckImageID` reads `imgID`, `bimVer`, `metaVer`,
    /// `imgType` and `len` from it.
    @Test func imageIdentifyIsTheProfilesPayload() {
        let expected: [UInt8] = [
            0x43, 0x43, 0x32, 0x36, 0x78, 0x32, 0x52, 0x31,  // 0  imgID "CC26x2R1"
            0x03,  // 8  bimVer
            0x01,  // 9  metaVer
            0xFF,  // 10 imgCpStat
            0xFF,  // 11 crcStat
            0x07,  // 12 imgType
            0x01,  // 13 imgNo
            0x48, 0x00, 0x00, 0x00,  // 14 len: 72
            0x30, 0x30, 0x30, 0x31,  // 18 softVer "0001"
        ]
        #expect(TIOADImageHeader.identify(Self.image) == expected)
    }

    /// The CRC runs from offset 12 (`CRC_DATA_START_ADDR`, imgBinUtil.py;
    /// `IMG_DATA_OFFSET` = `BIM_VER_OFFSET`, oad_image_header.h): the image ID
    /// is outside it, bimVer is inside. A CC13x2 image carries "CC13x2R1"
    /// (`OAD_IMG_ID_VAL` for DeviceFamily_CC13X2) and keeps its CRC; a changed
    /// bimVer fails `oadCheckDL` with OAD_CRC_ERR.
    @Test func theCRCStartsAtOffset12() throws {
        var cc13x2 = Self.image
        cc13x2.replaceSubrange(0..<8, with: Array("CC13x2R1".utf8))
        #expect(TIOADImageHeader.problem(cc13x2) == nil)
        #expect(try TIOADImageHeader(decoding: cc13x2).imageID == Array("CC13x2R1".utf8))
        #expect(Array(TIOADImageHeader.identify(cc13x2).prefix(8)) == Array("CC13x2R1".utf8))
        // Both families' images are TI OAD's to flash; an older OAD's "OAD IMG " is not.
        #expect(TIOADProtocol().imageAffinity(ImageProbe(path: "app_oad.bin", head: Array(cc13x2.prefix(64)))) == .owns)
        #expect(TIOADProtocol().imageAffinity(ImageProbe(path: "app_oad.bin", head: Array(Self.image.prefix(64)))) == .owns)
        #expect(TIOADProtocol().imageAffinity(ImageProbe(path: "app_oad.bin", head: Array("OAD IMG ".utf8) + Array(Self.image[8..<64]))) == .refuses)

        var bim = Self.image
        bim[12] = 0x02
        #expect(TIOADImageHeader.problem(bim) == "the CRC-32 at offset 8 does not match bytes 12 to the end")
        var codeByte = Self.image
        codeByte[60] ^= 0x01
        #expect(TIOADImageHeader.problem(codeByte) == "the CRC-32 at offset 8 does not match bytes 12 to the end")
    }

    /// Refused: a file shorter than its `len` (the device counts blocks from
    /// `len`, oad.c `oadImgIdentifyWrite` and `oadImgBlockWrite`), and a file
    /// shorter than `imgFixedHdr_t` (`OAD_IMG_HDR_LEN`, 44 bytes).
    @Test func truncatedImagesAreRefused() {
        let short = Array(Self.image.dropLast())
        #expect(TIOADImageHeader.problem(short) == "its header says 72 bytes at offset 24, but the file has 71")
        let headerless = Array(Self.image.prefix(43))
        do throws(TIOADImageError) {
            _ = try TIOADImageHeader(decoding: headerless)
            Issue.record("a 43-byte file was read as an OAD header")
        } catch {
            #expect(error.description.contains("44-byte"), "\(error.description)")
        }
        #expect(TIOADImageHeader.problem(headerless) != nil)
    }

    /// Refused by the device although its CRC matches: [TI] oad.c `oadCheckDL`
    /// returns OAD_CRC_ERR at once when the header's `crcStat` is `CRC_INVALID`
    /// (0xFC, oad_image_header.h), before computing anything. This image is the
    /// one above with crcStat 0xFC and its CRC recomputed with Python's
    /// `zlib.crc32(image[12:])` (0x644562BB), so only crcStat can refuse it.
    ///
    /// bleota did not look at crcStat until this test.
    @Test func anImageMarkedCRCInvalidIsRefused() {
        var marked = Self.image
        marked[17] = 0xFC  // crcStat: CRC_INVALID
        marked.replaceSubrange(8..<12, with: [0xBB, 0x62, 0x45, 0x64])  // crc32: 0x644562BB
        #expect(CRC32.checksum(marked[12...]) == 0x6445_62BB)
        #expect(TIOADImageHeader.problem(marked) != nil, "oadCheckDL refuses crcStat CRC_INVALID (0xFC) with OAD_CRC_ERR")
    }

    /// bleota's sample encoder puts the vendor-defined fields where
    /// `imgFixedHdr_t` and `imgPayloadSeg_t` have them and fills len,
    /// imgEndAddr, the segment length and the CRC as imgBinUtil.py and
    /// computeCRC32.py do. (Its image type, number, imgVld, prgEntry and rfu
    /// are its own, so the whole header is not compared with the one above.)
    @Test func theSampleEncoderWritesTheVendorsOffsets() {
        let code: [UInt8] = Array(Self.image.suffix(16))
        let sample = TIOADImageHeader.sample(code, softwareVersion: "0001")
        #expect(sample.count == 72)
        #expect(Array(sample[0..<8]) == Array("CC26x2R1".utf8))  // imgID
        #expect(sample[12] == 0x03 && sample[13] == 0x01)  // bimVer, metaVer
        #expect(Array(sample[14..<16]) == [0xFE, 0xFF])  // techType OAD_WIRELESS_TECH_BLE
        #expect(sample[16] == 0xFF && sample[17] == 0xFF)  // imgCpStat, crcStat DEFAULT_STATE
        #expect(Array(sample[24..<28]) == [0x48, 0x00, 0x00, 0x00])  // len: the file
        #expect(Array(sample[32..<36]) == Array("0001".utf8))  // softVer
        #expect(Array(sample[36..<40]) == [0x47, 0x00, 0x00, 0x00])  // imgEndAddr = startAddr + len − 1
        #expect(Array(sample[40..<42]) == [0x2C, 0x00])  // hdrLen 44
        #expect(Array(sample[44..<48]) == [0x01, 0xFE, 0xFF, 0xFF])  // segTypeImg, wirelessTech, rfu
        #expect(Array(sample[48..<52]) == [0x1C, 0x00, 0x00, 0x00])  // imgSegLen = len − 44
        #expect(Array(sample[52..<56]) == [0x00, 0x00, 0x00, 0x00])  // startAddr
        #expect(Array(sample.suffix(16)) == code)
        let crc = UInt32(sample[8]) | UInt32(sample[9]) << 8 | UInt32(sample[10]) << 16 | UInt32(sample[11]) << 24
        #expect(crc == CRC32.checksum(sample[12...]))
    }
}
