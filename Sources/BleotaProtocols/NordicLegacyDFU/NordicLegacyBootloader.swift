import BleotaCodec

/// A legacy DFU bootloader (nRF5 SDK 11, as Adafruit's nRF52 bootloader
/// builds it, dual bank) as a pure state machine: control point writes and
/// packet writes in, notifications and resets out.
///
/// Its rules (SDK 11 `dfu_transport_ble.c`, `dfu_dual_bank.c`, Adafruit's
/// `dfu_init.c`): Start takes the image type, then the three sizes on the
/// packet characteristic, each a multiple of 4, an application alone; the
/// init packet goes between `02 00` and `02 01` and is checked then (device
/// type 0x0052, a SoftDevice requirement naming 0xFFFE or the installed one);
/// the image follows `03` in multiples of 4 bytes, with a receipt (`11`,
/// bytes so far) every N packets and `10 03 01` after the last; Validate
/// compares the image's CRC-16 with the init packet's; only Activate after a
/// successful Validate installs anything. A second Start in one boot is
/// refused (invalid state).
package struct NordicLegacyBootloader: Sendable {
    package struct Flash: Sendable {
        /// The installed SoftDevice's firmware ID (0x00B6: S140 6.1.1), nil without one.
        package var softDeviceID: UInt16? = 0x00B6
        package var application: [UInt8]?
        package var applicationVersion: UInt32 = 1
        package var softDevice: [UInt8] = []
        package var bootloader: [UInt8] = []
        /// Bytes an update may occupy (bank 1).
        package var slotSize = 1 << 20
        package init() {}
    }

    package enum Action: Sendable, Hashable {
        case notify(NordicLegacyNotification)
        /// Validated and asked to activate: reset into the new image.
        case activate
        /// Reset without activating anything.
        case reset
    }

    enum State: Sendable, Hashable {
        case idle
        case awaitingSizes(NordicLegacyImageType)
        case ready
        case receivingInit
        case initValidated
        case receivingData
        case received
        case validated
    }

    package var flash: Flash
    private(set) var state: State = .idle
    private var type: NordicLegacyImageType = .application
    private var sizes: (softDevice: Int, bootloader: Int, application: Int) = (0, 0, 0)
    private var initPacket: [UInt8] = []
    private var validInit: NordicLegacyInitPacket?
    /// The image received so far (bank 1).
    package private(set) var image: [UInt8] = []
    private var receiptInterval: UInt16 = 0
    private var receiptCountdown: UInt16 = 0
    /// Pages the last Start erased, for the device half to charge erase time.
    package private(set) var pagesToErase = 0

    package init(flash: Flash) { self.flash = flash }

    private var total: Int { sizes.softDevice + sizes.bootloader + sizes.application }

    /// A reset: RAM state is gone.
    package mutating func restart() {
        state = .idle
        initPacket = []
        validInit = nil
        image = []
        receiptInterval = 0
        receiptCountdown = 0
    }

    private func answer(_ operation: NordicLegacyOperation, _ status: NordicLegacyStatus) -> [Action] {
        [.notify(.response(operation, status))]
    }

    /// A write to the control point.
    package mutating func control(_ bytes: [UInt8]) -> [Action] {
        guard let code = bytes.first else { return [] }
        guard let operation = NordicLegacyOperation(rawValue: code) else { return [.notify(.notSupported(operation: code))] }
        switch operation {
        case .startDFU:
            guard bytes.count >= 2 else { return answer(.startDFU, .operationFailed) }
            guard state == .idle else { return answer(.startDFU, .invalidState) }
            guard let kind = NordicLegacyImageType(rawValue: bytes[1]) else { return answer(.startDFU, .notSupported) }
            state = .awaitingSizes(kind)
            return []
        case .initParameters:
            guard bytes.count >= 2 else { return answer(.initParameters, .operationFailed) }
            if bytes[1] == 0 {
                guard state == .ready || state == .receivingInit else { return answer(.initParameters, .invalidState) }
                state = .receivingInit
                initPacket = []
                return []
            }
            guard state == .receivingInit else { return answer(.initParameters, .invalidState) }
            guard let packet = prevalidate(initPacket) else {
                state = .ready
                return answer(.initParameters, .operationFailed)
            }
            validInit = packet
            state = .initValidated
            return answer(.initParameters, .success)
        case .receiveFirmware:
            guard state == .initValidated else { return answer(.receiveFirmware, .invalidState) }
            state = .receivingData
            receiptCountdown = receiptInterval
            return []
        case .validate:
            guard state == .received, let validInit else { return answer(.validate, .invalidState) }
            guard NordicLegacyInitPacket.crc(of: image) == validInit.imageCRC else {
                restart()
                return answer(.validate, .crcError)
            }
            state = .validated
            return answer(.validate, .success)
        case .activateAndReset:
            guard state == .validated else { return [.reset] }
            install()
            return [.activate]
        case .reset:
            return [.reset]
        case .reportReceivedSize:
            return [.notify(.receivedSize(UInt32(image.count)))]
        case .receiptRequest:
            guard bytes.count >= 3 else { return answer(.receiptRequest, .notSupported) }
            receiptInterval = UInt16(bytes[1]) | UInt16(bytes[2]) << 8
            receiptCountdown = receiptInterval
            return []
        }
    }

    /// A write to the packet characteristic: sizes, init packet bytes or image bytes, by state.
    package mutating func packet(_ bytes: [UInt8]) -> [Action] {
        switch state {
        case .awaitingSizes(let kind):
            guard bytes.count == 12 else {
                state = .idle
                return answer(.startDFU, .notSupported)
            }
            var reader = ByteReader(bytes)
            let softDevice = Int((try? reader.readUInt32(.little)) ?? 0)
            let bootloader = Int((try? reader.readUInt32(.little)) ?? 0)
            let application = Int((try? reader.readUInt32(.little)) ?? 0)
            state = .idle
            let applicationWithOthers = application > 0 && (softDevice > 0 || bootloader > 0)
            guard !applicationWithOthers, [softDevice, bootloader, application].allSatisfy({ $0 % 4 == 0 }) else {
                return answer(.startDFU, .notSupported)
            }
            let sum = softDevice + bootloader + application
            guard sum > 0, sum <= flash.slotSize else { return answer(.startDFU, .dataSizeExceedsLimit) }
            type = kind
            sizes = (softDevice, bootloader, application)
            image = []
            pagesToErase = (sum + 4095) / 4096
            state = .ready
            return answer(.startDFU, .success)
        case .receivingInit:
            guard initPacket.count + bytes.count <= 128 else {
                state = .ready
                return answer(.initParameters, .operationFailed)
            }
            initPacket += bytes
            return []
        case .receivingData:
            guard bytes.count % 4 == 0 else { return answer(.receiveFirmware, .notSupported) }
            guard image.count + bytes.count <= total else {
                restart()
                return answer(.receiveFirmware, .dataSizeExceedsLimit)
            }
            image += bytes
            if image.count == total {
                state = .received
                return answer(.receiveFirmware, .success)
            }
            guard receiptInterval > 0 else { return [] }
            receiptCountdown = receiptCountdown > 0 ? receiptCountdown - 1 : 0
            guard receiptCountdown == 0 else { return [] }
            receiptCountdown = receiptInterval
            return [.notify(.receipt(UInt32(image.count)))]
        case .ready:
            return answer(.receiveFirmware, .invalidState)
        default:
            return []
        }
    }

    /// Adafruit's `dfu_init_prevalidate`: the device type, the SoftDevice requirement, and for a
    /// SoftDevice or bootloader the board's revision.
    func prevalidate(_ bytes: [UInt8]) -> NordicLegacyInitPacket? {
        guard bytes.count >= 14, let packet = try? NordicLegacyInitPacket(decoding: bytes) else { return nil }
        guard packet.deviceType == NordicLegacyInitPacket.adafruitDeviceType else { return nil }
        if type != .application, ![0xADAF, 52840, 52833].contains(packet.deviceRevision) { return nil }
        let installed = flash.softDeviceID
        guard !packet.softDeviceRequirements.isEmpty,
            packet.softDeviceRequirements.contains(where: { $0 == 0xFFFE || $0 == installed })
        else { return nil }
        return packet
    }

    private mutating func install() {
        let received = image
        switch type {
        case .application:
            flash.application = received
            if let version = validInit?.applicationVersion, version != 0xFFFF_FFFF { flash.applicationVersion = version }
        case .softDevice:
            flash.softDevice = received
        case .bootloader:
            flash.bootloader = received
        case .softDeviceAndBootloader:
            let split = min(received.count, sizes.softDevice)
            flash.softDevice = Array(received[..<split])
            flash.bootloader = Array(received[split...])
        }
        restart()
    }
}
