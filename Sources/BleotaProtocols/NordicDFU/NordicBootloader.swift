import BleotaCodec
import Crypto

/// A Secure DFU bootloader of the nRF5 SDK 17.1 as a pure state machine:
/// requests and data in, answers and activations out, no I/O and no clock.
/// The simulated device (``NordicSecureDFUDevice``) hosts it; tests drive it
/// directly as a table of requests and answers.
///
/// Its rules are the SDK's (`nrf_dfu_req_handler.c`, `nrf_dfu_validation.c`,
/// `nrf_dfu_ver_validation.c`; see protocols/nordic-dfu.md for the list):
/// a command object of at most 512 bytes whose Create wipes all progress;
/// 4096-byte data objects whose Create discards the unexecuted part of the
/// current one; Select and Calculate Checksum covering the whole image;
/// Execute only of a complete object; the init packet validated at its
/// Execute (signature, type, hash type, hardware version, SoftDevice
/// requirement, version rules, sizes, space) and the image's SHA-256 at the
/// last data Execute, after which — and only after which — the image is
/// activated. Data writes are never answered except by receipt notifications.
package struct NordicBootloader: Sendable {
    /// What survives a reset: the settings page and the banks.
    package struct Flash: Sendable {
        /// `NRF_DFU_HW_VERSION`: init packets must name exactly this.
        package var hardwareVersion: UInt32 = 52
        /// The installed SoftDevice's firmware ID, nil without one.
        package var softDeviceID: UInt16? = 0x0101
        /// The public key init packets are checked against; nil: signatures are not checked
        /// (a bootloader built without `NRF_DFU_REQUIRE_SIGNED_APP_UPDATE` and without a key).
        package var publicKey: P256.Signing.PublicKey? {
            get { publicKeyDER.flatMap { try? P256.Signing.PublicKey(derRepresentation: $0) } }
            set { publicKeyDER = newValue.map { Array($0.derRepresentation) } }
        }
        /// The key as DER SubjectPublicKeyInfo (Crypto's key type is not Sendable).
        private var publicKeyDER: [UInt8]?
        package var applicationVersion: UInt32 = 1
        package var bootloaderVersion: UInt32 = 1
        /// The application in bank 0, nil when none is valid (the device then stays in its bootloader).
        package var application: [UInt8]?
        /// The last SoftDevice and bootloader images installed, for inspection.
        package var softDevice: [UInt8] = []
        package var bootloader: [UInt8] = []
        /// Bytes an update may occupy (bank 1).
        package var slotSize = 1 << 20
        /// `NRF_DFU_SAVE_PROGRESS_IN_FLASH`: data progress survives a reset (off in the SDK's examples).
        package var savesDataProgress = false
        /// The executed init command (written to flash at its Execute, so it survives a disconnect).
        var validInit: (packet: NordicInitPacket, bytes: [UInt8])?
        /// Data progress written to flash (with ``savesDataProgress``): offset and the image so far.
        var savedData: [UInt8] = []

        package init() {}
    }

    /// What an activation installed.
    package enum Activation: Sendable, Hashable {
        case application(version: UInt32)
        case softDevice
        case bootloader(version: UInt32)
        case softDeviceAndBootloader(version: UInt32)
    }

    /// What the host half of a transport does with a request's outcome.
    package enum Action: Sendable, Hashable {
        /// Notify this on the control point (or send it as a SLIP frame).
        case respond(NordicDFUResponse)
        /// The last object executed and the image verified: reset into it after answering.
        case activate(Activation)
        /// An abort: reset without activating anything.
        case reset
    }

    package static let commandObjectMaximum = 512
    package static let dataObjectMaximum = 4096

    package var flash: Flash
    /// The type the last Select or Create named: Write, Calculate Checksum and Execute act on it.
    package private(set) var currentObject: NordicDFUObjectType = .command
    /// The command object being received.
    package private(set) var command: [UInt8] = []
    private var commandSize = 0
    /// The image received so far (bank 1), its CRC, and the executed part.
    package private(set) var image: [UInt8] = []
    private var imageCRC = CRC32()
    private var executedOffset = 0
    private var executedCRC: UInt32 = 0
    private var dataObjectSize = 0
    private var receiptInterval: UInt16 = 0
    private var receiptCountdown: UInt16 = 0

    package init(flash: Flash) {
        self.flash = flash
        restoreFromFlash()
    }

    /// A reset or reconnection: RAM is reloaded from the settings page.
    package mutating func restoreFromFlash() {
        currentObject = .command
        receiptInterval = 0
        receiptCountdown = 0
        dataObjectSize = 0
        if let valid = flash.validInit {
            command = valid.bytes
            commandSize = valid.bytes.count
        } else {
            command = []
            commandSize = 0
        }
        image = flash.validInit == nil ? [] : flash.savedData
        imageCRC = CRC32()
        imageCRC.update(image)
        executedOffset = image.count
        executedCRC = imageCRC.value
    }

    /// The init packet executed and valid, if any.
    package var validInitPacket: NordicInitPacket? { flash.validInit?.packet }

    // MARK: Requests

    /// Handles one control point request. `serial`: the transport is serial,
    /// where the full operation set is compiled in; BLE bootloaders are built
    /// with `NRF_DFU_PROTOCOL_REDUCED` and refuse version, MTU, ping and write.
    package mutating func handle(_ request: NordicDFURequest, serial: Bool, serialMTU: UInt16 = 131) -> [Action] {
        let operation = request.operation
        func answer(_ result: NordicDFUResult, _ payload: NordicDFUResponse.Payload = .none) -> [Action] {
            [.respond(NordicDFUResponse(operation: operation, result: result, payload: payload))]
        }
        func extended(_ error: NordicDFUExtendedError) -> [Action] {
            [.respond(NordicDFUResponse(operation: operation, result: .extendedError, extendedError: error))]
        }
        switch request {
        case .protocolVersion:
            return serial ? answer(.success, .protocolVersion(1)) : answer(.operationNotSupported)
        case .getSerialMTU:
            return serial ? answer(.success, .serialMTU(serialMTU)) : answer(.operationNotSupported)
        case .ping(let id):
            return serial ? answer(.success, .ping(id: id)) : answer(.operationNotSupported)
        case .hardwareVersion:
            guard serial else { return answer(.operationNotSupported) }
            var writer = ByteWriter()
            for value: UInt32 in [0x52832, 0x41414230, 0x80000, 0x10000, 4096] { writer.write(value, .little) }
            return answer(.success, .raw(writer.bytes))
        case .firmwareVersion(let number):
            guard serial else { return answer(.operationNotSupported) }
            return answer(.success, .raw(firmwareVersionRecord(number)))
        case .write(let bytes):
            // Serial only: the data that BLE carries on the packet characteristic.
            guard serial else { return answer(.operationNotSupported) }
            return receive(bytes)
        case .setReceiptNotification(let packets):
            receiptInterval = packets
            receiptCountdown = packets
            return answer(.success)
        case .select(let type):
            currentObject = type
            switch type {
            case .command:
                return answer(
                    .success,
                    .selected(
                        maximumSize: UInt32(Self.commandObjectMaximum), offset: UInt32(command.count),
                        crc: CRC32.checksum(command)))
            case .data:
                return answer(.success, .selected(maximumSize: UInt32(Self.dataObjectMaximum), offset: UInt32(image.count), crc: imageCRC.value))
            }
        case .calculateChecksum:
            return answer(.success, checksum())
        case .create(let type, let size):
            currentObject = type
            receiptCountdown = receiptInterval
            switch type {
            case .command: return createCommand(size: Int(size), answer: answer)
            case .data: return createData(size: Int(size), answer: answer)
            }
        case .execute:
            switch currentObject {
            case .command: return executeCommand(answer: answer, extended: extended)
            case .data: return executeData(answer: answer, extended: extended)
            }
        case .abort:
            return answer(.success) + [.reset]
        }
    }

    /// Data written to the packet characteristic: appended to the current
    /// object; answered only when a receipt notification falls due.
    package mutating func receiveData(_ bytes: [UInt8]) -> [Action] {
        receive(bytes)
    }

    private mutating func receive(_ bytes: [UInt8]) -> [Action] {
        // A write is never answered, not even when it fails (nrf_dfu_ble.c, nrf_dfu_serial.c):
        // only a receipt that falls due says anything, and a failed write makes it a failure.
        let result = append(bytes)
        guard receiptInterval > 0 else { return [] }
        receiptCountdown = receiptCountdown > 0 ? receiptCountdown - 1 : 0
        guard receiptCountdown == 0 else { return [] }
        receiptCountdown = receiptInterval
        let response =
            result == .success
            ? NordicDFUResponse(operation: .calculateChecksum, payload: checksum())
            : NordicDFUResponse(operation: .calculateChecksum, result: result)
        return [.respond(response)]
    }

    private mutating func append(_ bytes: [UInt8]) -> NordicDFUResult {
        switch currentObject {
        case .command:
            guard command.count + bytes.count <= commandSize else { return .invalidParameter }
            command += bytes
            return .success
        case .data:
            guard flash.validInit != nil else { return .operationNotPermitted }
            guard image.count + bytes.count <= executedOffset + dataObjectSize else { return .invalidParameter }
            image += bytes
            imageCRC.update(bytes)
            return .success
        }
    }

    private func checksum() -> NordicDFUResponse.Payload {
        switch currentObject {
        case .command: .checksum(offset: UInt32(command.count), crc: CRC32.checksum(command))
        case .data: .checksum(offset: UInt32(image.count), crc: imageCRC.value)
        }
    }

    private mutating func createCommand(size: Int, answer: (NordicDFUResult, NordicDFUResponse.Payload) -> [Action]) -> [Action] {
        guard size > 0 else { return answer(.invalidParameter, .none) }
        guard size <= Self.commandObjectMaximum else { return answer(.insufficientResources, .none) }
        // A new init command forgets the old one and every byte of progress.
        flash.validInit = nil
        flash.savedData = []
        command = []
        commandSize = size
        image = []
        imageCRC = CRC32()
        executedOffset = 0
        executedCRC = 0
        dataObjectSize = 0
        return answer(.success, .none)
    }

    private mutating func createData(size: Int, answer: (NordicDFUResult, NordicDFUResponse.Payload) -> [Action]) -> [Action] {
        guard let valid = flash.validInit else { return answer(.operationNotPermitted, .none) }
        let total = Int(valid.packet.imageSize)
        guard size > 0 else { return answer(.invalidParameter, .none) }
        // Only the last object may be shorter than a page.
        guard size % Self.dataObjectMaximum == 0 || executedOffset + size == total else { return answer(.invalidParameter, .none) }
        guard size <= Self.dataObjectMaximum else { return answer(.insufficientResources, .none) }
        guard executedOffset + size <= total else { return answer(.operationNotPermitted, .none) }
        // What was received of an unexecuted object is dropped.
        if image.count > executedOffset {
            image.removeSubrange(executedOffset...)
            imageCRC = CRC32()
            imageCRC.update(image)
        }
        dataObjectSize = size
        return answer(.success, .none)
    }

    private mutating func executeCommand(
        answer: (NordicDFUResult, NordicDFUResponse.Payload) -> [Action],
        extended: (NordicDFUExtendedError) -> [Action]
    ) -> [Action] {
        guard commandSize > 0, command.count == commandSize else { return answer(.operationNotPermitted, .none) }
        if flash.validInit != nil { return answer(.success, .none) }
        switch validate(command) {
        case .success(let packet):
            flash.validInit = (packet, command)
            flash.savedData = []
            image = []
            imageCRC = CRC32()
            executedOffset = 0
            executedCRC = 0
            return answer(.success, .none)
        case .failure(let refusal):
            // A refused init command leaves nothing behind.
            command = []
            commandSize = 0
            switch refusal {
            case .result(let result): return answer(result, .none)
            case .extended(let error): return extended(error)
            }
        }
    }

    private mutating func executeData(
        answer: (NordicDFUResult, NordicDFUResponse.Payload) -> [Action],
        extended: (NordicDFUExtendedError) -> [Action]
    ) -> [Action] {
        guard let valid = flash.validInit else { return answer(.operationNotPermitted, .none) }
        guard dataObjectSize > 0, image.count - executedOffset == dataObjectSize else { return answer(.operationNotPermitted, .none) }
        executedOffset = image.count
        executedCRC = imageCRC.value
        dataObjectSize = 0
        if flash.savesDataProgress { flash.savedData = image }
        guard image.count == Int(valid.packet.imageSize) else { return answer(.success, .none) }
        // The whole image is here: its hash decides whether anything is activated.
        let packet = valid.packet
        let received = image
        flash.validInit = nil
        flash.savedData = []
        command = []
        commandSize = 0
        image = []
        imageCRC = CRC32()
        executedOffset = 0
        guard packet.hashMatches(received) == true else { return extended(.verificationFailed) }
        let version = packet.firmwareVersion ?? 0
        let activation: Activation
        switch packet.type ?? .application {
        case .application, .externalApplication:
            flash.application = received
            flash.applicationVersion = version
            activation = .application(version: version)
        case .softDevice:
            flash.softDevice = received
            adoptSoftDeviceID(received)
            activation = .softDevice
        case .bootloader:
            flash.bootloader = received
            flash.bootloaderVersion = version
            activation = .bootloader(version: version)
        case .softDeviceAndBootloader:
            let split = min(received.count, Int(packet.softDeviceSize))
            flash.softDevice = Array(received[..<split])
            flash.bootloader = Array(received[split...])
            flash.bootloaderVersion = version
            adoptSoftDeviceID(flash.softDevice)
            activation = .softDeviceAndBootloader(version: version)
        }
        return answer(.success, .none) + [.activate(activation)]
    }

    /// The new SoftDevice's firmware ID, from its info structure (magic 0x51B1E5DB at 0x3004, FWID at 0x300C;
    /// the image starts at 0x1000, after the MBR), which later init packets' sd_req must name.
    mutating func adoptSoftDeviceID(_ softDevice: [UInt8]) {
        var reader = ByteReader(softDevice)
        guard (try? reader.skip(0x2004)) != nil, (try? reader.readUInt32(.little)) == 0x51B1_E5DB,
            (try? reader.skip(4)) != nil, let id = try? reader.readUInt16(.little)
        else { return }
        flash.softDeviceID = id
    }

    // MARK: Init packet validation

    enum Refusal: Error {
        case result(NordicDFUResult)
        case extended(NordicDFUExtendedError)
    }

    /// The SDK's prevalidation, in its order: decode, signature, type, hash
    /// type, hardware version, SoftDevice requirement, firmware version, sizes.
    func validate(_ bytes: [UInt8]) -> Result<NordicInitPacket, Refusal> {
        guard let packet = try? NordicInitPacket(decoding: bytes) else { return .failure(.result(.invalidObject)) }
        let type = packet.type
        let key = flash.publicKey
        if packet.signedBytes == nil {
            if key != nil { return .failure(.extended(.signatureMissing)) }
        } else if let key {
            guard packet.signatureType == .ecdsaP256SHA256 else { return .failure(.extended(.wrongSignatureType)) }
            guard packet.signature.count == 64 else { return .failure(.result(.operationFailed)) }
            guard packet.signatureVerifies(with: key) == true else { return .failure(.result(.invalidObject)) }
        }
        guard let type else { return .failure(.extended(.initCommandInvalid)) }
        guard packet.hashType == .sha256 else { return .failure(.extended(.wrongHashType)) }
        guard let hardware = packet.hardwareVersion else { return .failure(.extended(.initCommandInvalid)) }
        guard hardware == flash.hardwareVersion else { return .failure(.extended(.hardwareVersionFailure)) }
        guard softDeviceRequirementMet(packet.softDeviceRequirements, type: type) else { return .failure(.extended(.softDeviceVersionFailure)) }
        switch type {
        case .application, .externalApplication:
            guard let version = packet.firmwareVersion else { return .failure(.extended(.initCommandInvalid)) }
            // NRF_DFU_APP_ACCEPT_SAME_VERSION is on in the SDK's examples.
            guard version >= flash.applicationVersion else { return .failure(.extended(.firmwareVersionFailure)) }
            guard packet.applicationSize > 0 else { return .failure(.extended(.initCommandInvalid)) }
        case .bootloader, .softDeviceAndBootloader:
            guard let version = packet.firmwareVersion else { return .failure(.extended(.initCommandInvalid)) }
            guard version > flash.bootloaderVersion else { return .failure(.extended(.firmwareVersionFailure)) }
            guard packet.bootloaderSize > 0, type == .bootloader || packet.softDeviceSize > 0 else {
                return .failure(.extended(.initCommandInvalid))
            }
        case .softDevice:
            guard packet.softDeviceSize > 0 else { return .failure(.extended(.initCommandInvalid)) }
        }
        guard packet.imageSize <= UInt64(flash.slotSize) else { return .failure(.result(.insufficientResources)) }
        return .success(packet)
    }

    /// `sd_req` against the installed SoftDevice (nrf_dfu_ver_validation.c).
    func softDeviceRequirementMet(_ requirements: [UInt32], type: NordicInitPacket.FirmwareType) -> Bool {
        guard let installed = flash.softDeviceID else { return requirements.isEmpty || requirements[0] == 0 }
        guard let first = requirements.first else { return false }
        if first == 0 { return type == .bootloader || type == .softDeviceAndBootloader }
        if type == .externalApplication, requirements.contains(NordicInitPacket.anySoftDevice) { return true }
        return requirements.contains(UInt32(installed))
    }

    /// Firmware version answer (serial): type, version, address, length of image `number`.
    private func firmwareVersionRecord(_ number: UInt8) -> [UInt8] {
        var writer = ByteWriter()
        let hasSoftDevice = flash.softDeviceID != nil
        if number == 0 {
            writer.write(UInt8(2))
            writer.write(flash.bootloaderVersion, .little)
            writer.write(UInt32(0x78000), .little)
            writer.write(UInt32(flash.bootloader.count), .little)
        } else if number == 1, hasSoftDevice {
            writer.write(UInt8(0))
            writer.write(UInt32(flash.softDeviceID ?? 0), .little)
            writer.write(UInt32(0x1000), .little)
            writer.write(UInt32(flash.softDevice.count), .little)
        } else if number == (hasSoftDevice ? 2 : 1), let application = flash.application {
            writer.write(UInt8(1))
            writer.write(flash.applicationVersion, .little)
            writer.write(UInt32(0x27000), .little)
            writer.write(UInt32(application.count), .little)
        } else {
            writer.write(UInt8(0xFF))
            writer.write(UInt32(0), .little)
            writer.write(UInt32(0), .little)
            writer.write(UInt32(0), .little)
        }
        return writer.bytes
    }
}
