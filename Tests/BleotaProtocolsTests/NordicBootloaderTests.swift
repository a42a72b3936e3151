import BleotaCodec
import BleotaEngine
import BleotaTestSupport
import Crypto
import Foundation
import Testing

@testable import BleotaProtocols

/// An application init packet for `image`, as nrfutil writes one.
func nordicInitPacket(
    for image: [UInt8], version: UInt32 = 2, hardware: UInt32 = 52, softDevices: [UInt32] = [0x0101],
    type: NordicInitPacket.FirmwareType = .application
) -> NordicInitPacket {
    var packet = NordicInitPacket(
        firmwareVersion: version, hardwareVersion: hardware, softDeviceRequirements: softDevices, type: type,
        applicationSize: UInt32(image.count), hash: SHA256Digest.hash(image))
    packet.hashType = .sha256
    switch type {
    case .application, .externalApplication: break
    case .softDevice:
        packet.applicationSize = 0
        packet.softDeviceSize = UInt32(image.count)
    case .bootloader:
        packet.applicationSize = 0
        packet.bootloaderSize = UInt32(image.count)
    case .softDeviceAndBootloader:
        packet.applicationSize = 0
        packet.softDeviceSize = UInt32(image.count / 2)
        packet.bootloaderSize = UInt32(image.count - image.count / 2)
    }
    return packet
}

/// The SDK 17.1 bootloader's rules, one request at a time: what it answers,
/// what it keeps, and that nothing but a verified image is activated.
@Suite struct NordicBootloaderTests {
    static func answers(_ actions: [NordicBootloader.Action]) -> [[UInt8]] {
        actions.compactMap { if case .respond(let response) = $0 { response.encode() } else { nil } }
    }

    /// Sends `packet` as the init command; returns the Execute's answer.
    static func sendInit(_ bootloader: inout NordicBootloader, _ bytes: [UInt8]) -> [UInt8] {
        _ = bootloader.handle(.create(.command, size: UInt32(bytes.count)), serial: false)
        _ = bootloader.receiveData(bytes)
        return answers(bootloader.handle(.execute, serial: false)).first ?? []
    }

    /// Sends the whole image in 4096-byte objects; returns every Execute's answer and the activation.
    static func sendImage(_ bootloader: inout NordicBootloader, _ image: [UInt8]) -> (answers: [[UInt8]], activation: NordicBootloader.Activation?) {
        var results: [[UInt8]] = []
        var activation: NordicBootloader.Activation?
        for start in stride(from: 0, to: image.count, by: 4096) {
            let end = min(start + 4096, image.count)
            _ = bootloader.handle(.create(.data, size: UInt32(end - start)), serial: false)
            _ = bootloader.receiveData(Array(image[start..<end]))
            let actions = bootloader.handle(.execute, serial: false)
            results += answers(actions)
            for case .activate(let done) in actions { activation = done }
        }
        return (results, activation)
    }

    static func ok(_ operation: NordicDFUOperation) -> [UInt8] { [0x60, operation.rawValue, 0x01] }
    static func extended(_ operation: NordicDFUOperation, _ error: NordicDFUExtendedError) -> [UInt8] { [0x60, operation.rawValue, 0x0B, error.rawValue] }

    @Test func aValidUpdateIsActivatedOnlyAtTheLastExecuteAndReplacesTheApplication() {
        let image = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        var bootloader = NordicBootloader(flash: NordicBootloader.Flash())
        let old = bootloader.flash.application
        #expect(Self.sendInit(&bootloader, nordicInitPacket(for: image).encode()) == Self.ok(.execute))
        let (answers, activation) = Self.sendImage(&bootloader, image)
        #expect(answers == [Self.ok(.execute), Self.ok(.execute), Self.ok(.execute)])
        #expect(activation == .application(version: 2))
        #expect(bootloader.flash.application == image && bootloader.flash.application != old)
        #expect(bootloader.flash.applicationVersion == 2)
    }

    @Test func anImageWhoseHashDiffersIsRefusedAtTheLastObjectAndNeverActivated() {
        let image = (0..<5000).map { UInt8(truncatingIfNeeded: $0) }
        var damaged = image
        damaged[4500] ^= 0x80
        var bootloader = NordicBootloader(flash: NordicBootloader.Flash())
        let old = bootloader.flash.application
        #expect(Self.sendInit(&bootloader, nordicInitPacket(for: image).encode()) == Self.ok(.execute))
        let (answers, activation) = Self.sendImage(&bootloader, damaged)
        #expect(answers == [Self.ok(.execute), Self.extended(.execute, .verificationFailed)])
        #expect(activation == nil)
        #expect(bootloader.flash.application == old && bootloader.flash.applicationVersion == 1)
        // The update is forgotten: a new init packet is needed.
        #expect(Self.answers(bootloader.handle(.create(.data, size: 4096), serial: false)) == [[0x60, 0x01, 0x08]])
    }

    /// Prevalidation in the SDK's order, each refusal its own code.
    @Test(arguments: [
        ("hardware version", nordicInitPacket(for: [1, 2, 3, 4], hardware: 53).encode(), [0x60, 0x04, 0x0B, 0x06] as [UInt8]),
        ("SoftDevice not in sd_req", nordicInitPacket(for: [1, 2, 3, 4], softDevices: [0x00B6]).encode(), [0x60, 0x04, 0x0B, 0x07]),
        ("0xFFFE is no wildcard for an application", nordicInitPacket(for: [1, 2, 3, 4], softDevices: [0xFFFE]).encode(), [0x60, 0x04, 0x0B, 0x07]),
        ("downgrade", nordicInitPacket(for: [1, 2, 3, 4], version: 0).encode(), [0x60, 0x04, 0x0B, 0x05]),
        ("bootloader not newer", nordicInitPacket(for: [1, 2, 3, 4], version: 1, type: .bootloader).encode(), [0x60, 0x04, 0x0B, 0x05]),
        ("not protobuf", [0xFF, 0xFF, 0xFF], [0x60, 0x04, 0x05]),
    ])
    func initPacketsAreValidatedAsTheSDKDoes(_ what: String, _ bytes: [UInt8], _ expected: [UInt8]) {
        var bootloader = NordicBootloader(flash: NordicBootloader.Flash())
        #expect(Self.sendInit(&bootloader, bytes) == expected, "\(what)")
        #expect(bootloader.validInitPacket == nil, "\(what): a refused init packet leaves nothing behind")
    }

    @Test func aBootloaderWithAKeyRequiresASignatureFromIt() throws {
        let key = P256.Signing.PrivateKey()
        let image = Array(repeating: UInt8(0xA5), count: 100)
        var flash = NordicBootloader.Flash()
        flash.publicKey = key.publicKey
        var unsigned = NordicBootloader(flash: flash)
        #expect(Self.sendInit(&unsigned, nordicInitPacket(for: image).encode()) == Self.extended(.execute, .signatureMissing))

        var otherKey = nordicInitPacket(for: image)
        try otherKey.sign(with: P256.Signing.PrivateKey())
        var wrong = NordicBootloader(flash: flash)
        #expect(Self.sendInit(&wrong, otherKey.encode()) == [0x60, 0x04, 0x05], "a signature from another key: invalid object")

        var signed = nordicInitPacket(for: image)
        try signed.sign(with: key)
        var right = NordicBootloader(flash: flash)
        #expect(Self.sendInit(&right, signed.encode()) == Self.ok(.execute))
        #expect(Self.sendImage(&right, image).activation == .application(version: 2))
    }

    /// Object rules: command size limits, page-sized data objects except the
    /// last, Execute only of a complete object, Create discarding the
    /// unexecuted part, Select and CRC over the whole image.
    @Test func objectRules() {
        let image = (0..<9000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        var bootloader = NordicBootloader(flash: NordicBootloader.Flash())
        func ask(_ request: NordicDFURequest) -> [UInt8] { Self.answers(bootloader.handle(request, serial: false)).first ?? [] }
        #expect(ask(.create(.command, size: 0)) == [0x60, 0x01, 0x03])
        #expect(ask(.create(.command, size: 513)) == [0x60, 0x01, 0x04])
        #expect(ask(.create(.data, size: 4096)) == [0x60, 0x01, 0x08], "no data before a valid init packet")
        #expect(Self.sendInit(&bootloader, nordicInitPacket(for: image).encode()) == Self.ok(.execute))
        #expect(ask(.create(.data, size: 1000)) == [0x60, 0x01, 0x03], "only the last object may be shorter than a page")
        #expect(ask(.create(.data, size: 8192)) == [0x60, 0x01, 0x04], "objects hold at most 4096 bytes")
        #expect(ask(.create(.data, size: 4096)) == Self.ok(.create))
        _ = bootloader.receiveData(Array(image[0..<2000]))
        #expect(ask(.execute) == [0x60, 0x04, 0x08], "an incomplete object cannot be executed")
        #expect(ask(.select(.data)) == [0x60, 0x06, 0x01] + le(4096) + le(2000) + le(CRC32.checksum(image[0..<2000])))
        // Create again: the 2000 bytes are dropped.
        #expect(ask(.create(.data, size: 4096)) == Self.ok(.create))
        #expect(ask(.calculateChecksum) == [0x60, 0x03, 0x01] + le(0) + le(0))
        _ = bootloader.receiveData(Array(image[0..<4096]))
        #expect(bootloader.receiveData([0]) == [], "a write past the object is dropped, unanswered")
        #expect(ask(.execute) == Self.ok(.execute))
        #expect(ask(.create(.data, size: 4096)) == Self.ok(.create))
        _ = bootloader.receiveData(Array(image[4096..<8192]))
        #expect(ask(.execute) == Self.ok(.execute))
        #expect(ask(.create(.data, size: 4096)) == [0x60, 0x01, 0x08], "an object past the image's end")
        #expect(
            ask(.select(.command)) == [0x60, 0x06, 0x01] + le(512) + le(UInt32(nordicInitPacket(for: image).encode().count))
                + le(CRC32.checksum(nordicInitPacket(for: image).encode())))
        // Create(command) wipes all progress.
        #expect(ask(.create(.command, size: 10)) == Self.ok(.create))
        #expect(ask(.select(.data)) == [0x60, 0x06, 0x01] + le(4096) + le(0) + le(0))
    }

    @Test func receiptNotificationsCountWritesAndCarryOffsetAndCRC() {
        let image = (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 3) }
        var bootloader = NordicBootloader(flash: NordicBootloader.Flash())
        #expect(Self.sendInit(&bootloader, nordicInitPacket(for: image).encode()) == Self.ok(.execute))
        _ = bootloader.handle(.setReceiptNotification(packets: 2), serial: false)
        _ = bootloader.handle(.create(.data, size: 4096), serial: false)
        #expect(bootloader.receiveData(Array(image[0..<100])) == [])
        #expect(Self.answers(bootloader.receiveData(Array(image[100..<200]))) == [[0x60, 0x03, 0x01] + le(200) + le(CRC32.checksum(image[0..<200]))])
        #expect(bootloader.receiveData(Array(image[200..<300])) == [])
    }

    @Test func bleRefusesTheSerialOnlyOperationsAndSerialAnswersThem() {
        var bootloader = NordicBootloader(flash: NordicBootloader.Flash())
        #expect(Self.answers(bootloader.handle(.ping(id: 7), serial: false)) == [[0x60, 0x09, 0x02]])
        #expect(Self.answers(bootloader.handle(.ping(id: 7), serial: true)) == [[0x60, 0x09, 0x01, 0x07]])
        #expect(Self.answers(bootloader.handle(.getSerialMTU, serial: true, serialMTU: 2051)) == [[0x60, 0x07, 0x01, 0x03, 0x08]])
        #expect(
            Self.answers(bootloader.handle(.write([1]), serial: true)) == [],
            "a write past the (empty) command object is refused in silence, over serial too")
        _ = bootloader.handle(.setReceiptNotification(packets: 1), serial: true)
        #expect(
            Self.answers(bootloader.handle(.write([1]), serial: true)) == [[0x60, 0x03, 0x03]],
            "only a receipt that falls due says the write failed")
    }

    @Test func theInitPacketSurvivesAReconnectionButDataProgressOnlyWhenSaved() {
        let image = (0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 5) }
        for saves in [false, true] {
            var flash = NordicBootloader.Flash()
            flash.savesDataProgress = saves
            var bootloader = NordicBootloader(flash: flash)
            #expect(Self.sendInit(&bootloader, nordicInitPacket(for: image).encode()) == Self.ok(.execute))
            _ = bootloader.handle(.create(.data, size: 4096), serial: false)
            _ = bootloader.receiveData(Array(image[0..<4096]))
            _ = bootloader.handle(.execute, serial: false)
            bootloader.restoreFromFlash()
            #expect(bootloader.validInitPacket != nil)
            let held = saves ? 4096 : 0
            #expect(
                Self.answers(bootloader.handle(.select(.data), serial: false))
                    == [[0x60, 0x06, 0x01] + le(4096) + le(UInt32(held)) + le(CRC32.checksum(image[0..<held]))])
        }
    }
}

func le(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }
