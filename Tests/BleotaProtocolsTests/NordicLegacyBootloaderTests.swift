import BleotaCodec
import BleotaLink
import Testing

@testable import BleotaProtocols

/// The legacy (SDK 11, Adafruit) bootloader's rules as a table, and the
/// HCI/SLIP serial framing.
@Suite struct NordicLegacyBootloaderTests {
    static let image = (0..<6000).map { UInt8(truncatingIfNeeded: $0 &* 17) }
    static let initPacket = NordicLegacyInitPacket(
        applicationVersion: 3, softDeviceRequirements: [0x00B6],
        imageCRC: NordicLegacyInitPacket.crc(of: image)
    ).encode()

    static func notifications(_ actions: [NordicLegacyBootloader.Action]) -> [[UInt8]] {
        actions.compactMap { if case .notify(let notification) = $0 { notification.encode() } else { nil } }
    }

    static func sizes(application: UInt32) -> [UInt8] {
        var writer = ByteWriter()
        writer.write(UInt32(0), .little)
        writer.write(UInt32(0), .little)
        writer.write(application, .little)
        return writer.bytes
    }

    /// Start, init, receipts, data, validate, activate.
    @Test func aWholeUpdateAnswersAsTheBootloaderDoesAndActivatesOnlyAfterValidate() {
        var bootloader = NordicLegacyBootloader(flash: NordicLegacyBootloader.Flash())
        #expect(bootloader.control([0x01, 0x04]) == [], "Start waits for the sizes")
        #expect(Self.notifications(bootloader.packet(Self.sizes(application: 6000))) == [[0x10, 0x01, 0x01]])
        #expect(bootloader.control([0x02, 0x00]) == [])
        #expect(bootloader.packet(Array(Self.initPacket[..<8])) == [])
        #expect(bootloader.packet(Array(Self.initPacket[8...])) == [])
        #expect(Self.notifications(bootloader.control([0x02, 0x01])) == [[0x10, 0x02, 0x01]])
        #expect(bootloader.control([0x08, 0x02, 0x00]) == [])
        #expect(bootloader.control([0x03]) == [])
        #expect(bootloader.packet(Array(Self.image[0..<1000])) == [])
        #expect(Self.notifications(bootloader.packet(Array(Self.image[1000..<2000]))) == [[0x11, 0xD0, 0x07, 0x00, 0x00]], "a receipt: 2000 bytes")
        #expect(Self.notifications(bootloader.packet([1, 2, 3])) == [[0x10, 0x03, 0x03]], "chunks are multiples of 4")
        #expect(Self.notifications(bootloader.control([0x07])) == [[0x10, 0x07, 0x01, 0xD0, 0x07, 0x00, 0x00]])
        #expect(Self.notifications(bootloader.control([0x04])) == [[0x10, 0x04, 0x02]], "validate before all bytes: invalid state")
        _ = bootloader.packet(Array(Self.image[2000..<4000]))
        #expect(Self.notifications(bootloader.packet(Array(Self.image[4000...]))) == [[0x10, 0x03, 0x01]], "the last packet: no receipt, the answer")
        #expect(bootloader.flash.application == nil, "nothing is installed before Validate and Activate")
        #expect(Self.notifications(bootloader.control([0x04])) == [[0x10, 0x04, 0x01]])
        #expect(bootloader.control([0x05]) == [.activate])
        #expect(bootloader.flash.application == Self.image && bootloader.flash.applicationVersion == 3)
    }

    @Test func aCRCMismatchIsRefusedAtValidateAndActivateThenOnlyResets() {
        var flash = NordicLegacyBootloader.Flash()
        flash.application = [1, 2, 3, 4]
        var bootloader = NordicLegacyBootloader(flash: flash)
        _ = bootloader.control([0x01, 0x04])
        _ = bootloader.packet(Self.sizes(application: 6000))
        _ = bootloader.control([0x02, 0x00])
        _ = bootloader.packet(Self.initPacket)
        _ = bootloader.control([0x02, 0x01])
        _ = bootloader.control([0x03])
        var damaged = Self.image
        damaged[10] ^= 1
        _ = bootloader.packet(damaged)
        #expect(Self.notifications(bootloader.control([0x04])) == [[0x10, 0x04, 0x05]])
        #expect(bootloader.control([0x05]) == [.reset])
        #expect(bootloader.flash.application == [1, 2, 3, 4])
    }

    @Test(arguments: [
        ("device type not Adafruit's", NordicLegacyInitPacket(deviceType: 0xFFFF, imageCRC: 0).encode()),
        ("SoftDevice not named", NordicLegacyInitPacket(softDeviceRequirements: [0x0101], imageCRC: 0).encode()),
        ("no SoftDevice requirement", NordicLegacyInitPacket(softDeviceRequirements: [], imageCRC: 0).encode()),
        ("too short", [0x52, 0x00, 0xFF]),
    ])
    func initPacketsTheBootloaderRefuses(_ what: String, _ bytes: [UInt8]) {
        var bootloader = NordicLegacyBootloader(flash: NordicLegacyBootloader.Flash())
        _ = bootloader.control([0x01, 0x04])
        _ = bootloader.packet(Self.sizes(application: 6000))
        _ = bootloader.control([0x02, 0x00])
        _ = bootloader.packet(bytes)
        #expect(Self.notifications(bootloader.control([0x02, 0x01])) == [[0x10, 0x02, 0x06]], "\(what)")
    }

    @Test func startRulesSizesAndOneUpdatePerBoot() {
        var bootloader = NordicLegacyBootloader(flash: NordicLegacyBootloader.Flash())
        #expect(Self.notifications(bootloader.control([0x01])) == [[0x10, 0x01, 0x06]], "Start without a type: operation failed")
        _ = bootloader.control([0x01, 0x04])
        #expect(Self.notifications(bootloader.packet(Self.sizes(application: 6001))) == [[0x10, 0x01, 0x03]], "sizes are multiples of 4")
        _ = bootloader.control([0x01, 0x04])
        #expect(Self.notifications(bootloader.packet(Self.sizes(application: 8 << 20))) == [[0x10, 0x01, 0x04]], "larger than the bank")
        _ = bootloader.control([0x01, 0x04])
        #expect(Self.notifications(bootloader.packet(Self.sizes(application: 6000))) == [[0x10, 0x01, 0x01]])
        #expect(Self.notifications(bootloader.control([0x01, 0x04])) == [[0x10, 0x01, 0x02]], "a second Start in the same boot")
        #expect(Self.notifications(bootloader.control([0x0E])) == [[0x10, 0x0E, 0x03]], "an unknown operation")
    }

    /// Frames as adafruit-nrfutil 0.5.3.post16 sent them to a pty (observed), and the device's acknowledgement.
    @Test func hciFramesMatchWhatAdafruitNrfutilSends() throws {
        var payload = ByteWriter()
        payload.write(UInt32(3), .little)
        payload.write(UInt32(4), .little)
        payload.write(UInt32(0), .little)
        payload.write(UInt32(0), .little)
        payload.write(UInt32(0x7534), .little)
        let frame = NordicHCILink.frame(payload.bytes, sequence: 1)
        #expect(frame.hexString == "c0d14e01e003000000040000000000000000000000347500008b7ac0")
        #expect(NordicHCILink.acknowledgement(expecting: 2).hexString == "c010000 0f0c0".replacingOccurrences(of: " ", with: ""))
        let parsed = try #require(NordicHCILink.parse(try SLIP.decode(frame.dropFirst().dropLast())))
        #expect(parsed.sequence == 1 && parsed.payload == payload.bytes)
        var damaged = Array(frame.dropFirst().dropLast())
        damaged[6] ^= 1
        #expect(NordicHCILink.parse(try SLIP.decode(damaged)) == nil, "a frame whose CRC fails is dropped")
    }

    @Test func slipEscapesBothSpecialBytesAndRefusesBrokenEscapes() throws {
        #expect(SLIP.encode([0x01, 0xC0, 0xDB, 0x02]) == [0x01, 0xDB, 0xDC, 0xDB, 0xDD, 0x02, 0xC0])
        #expect(try SLIP.decode([0x01, 0xDB, 0xDC, 0xDB, 0xDD, 0x02]) == [0x01, 0xC0, 0xDB, 0x02])
        #expect(throws: DecodingError.self) { try SLIP.decode([0xDB, 0x01]) }
        #expect(throws: DecodingError.self) { try SLIP.decode([0x01, 0xDB]) }
    }
}
