import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaZlib
import Logging

/// The environment the native device half runs in: the shared one.
package typealias NativeDeviceEnvironment = DeviceEnvironment

/// The device half of bleota's native protocol: the reference a firmware
/// implementation can be checked against, served by the simulator and by
/// `bleota serve`.
///
/// Its rules are the protocol's promises: an image is activated only after a
/// successful VERIFY of exactly the bytes held; a transfer interrupted by a
/// disconnect or power loss keeps what reached flash, keyed by the image hash;
/// anything malformed gets an ERROR reply, never a crash.
package actor NativeDevice: DeviceHalf {
    package nonisolated let storage: DeviceStorage
    package nonisolated let name: String
    package let capabilities: NativeMessage.Capabilities
    package let bufferCount: Int
    package let maximumPacket: Int
    /// Application or bootloader, as HELLO reports it.
    package private(set) var currentMode: NativeMessage.DeviceMode = .application
    private var logger = Logger(label: "bleota.device")

    /// RAM: the transfer in progress on this boot.
    private var transfer: (target: NativeMessage.Target, start: NativeMessage.Start, receiver: ReceiverWindow)?

    package init(
        name: String, storage: DeviceStorage, bufferCount: Int, maximumPacket: Int,
        capabilities: NativeMessage.Capabilities = [.deflate, .testTransfer, .files, .resume, .compactData, .ackIntervalChange, .delta]
    ) {
        self.name = name
        self.storage = storage
        self.bufferCount = bufferCount
        self.maximumPacket = maximumPacket
        self.capabilities = capabilities
        currentMode = storage.snapshot.bootToBootloader ? .bootloader : .application
    }

    /// Power-up: RAM is gone, flash decides the mode.
    package func boot() {
        transfer = nil
        currentMode = storage.withState { $0.bootToBootloader } ? .bootloader : .application
    }

    package func powerCycle() { boot() }

    package var mode: DeviceMode { currentMode == .bootloader ? .bootloader : .application }

    package var runningVersion: String { firmwareVersion }

    package var firmware: FirmwareState {
        let state = storage.snapshot
        return FirmwareState(running: state.activeImage, version: state.activeVersion, mode: state.bootToBootloader ? .bootloader : .application)
    }

    package var firmwareVersion: String { storage.withState { $0.activeVersion } }

    /// Serves one connection until the link drops.
    package func serve(_ link: any Link, environment: NativeDeviceEnvironment) async {
        var reassembler = NativeReassembler()
        while true {
            let received: [UInt8]
            do { received = try await link.receive() } catch { return }
            let cost = environment.processingTime(received.count)
            if cost > .zero { try? await environment.clock.sleep(for: cost) }
            guard let packet = reassembler.feed(received) else { continue }
            do {
                try await handle(packet, link: link, environment: environment)
            } catch {
                return
            }
        }
    }

    private func reply(_ message: NativeMessage, on link: any Link) async throws(LinkError) {
        try await NativeFraming.send(message, on: link)
    }

    /// The acknowledgement bitmap that fits the link: ACK is 6 bytes plus the bitmap, in one packet
    /// of the link and of the device's own (its BLE link's, behind `sim serve --link`).
    private func acknowledgement(_ receiver: inout ReceiverWindow, link: any Link) -> NativeMessage {
        let packet = min(link.parameters.maximumPayload, maximumPacket)
        let ack = receiver.acknowledgement(bitmapBytes: max(0, min(32, packet - 6)))
        return .ack(.init(nextExpected: ack.nextExpected, bitmap: ack.bitmap))
    }

    private func fail(_ request: UInt8, _ status: NativeStatus, _ message: String, on link: any Link) async throws(LinkError) {
        try await reply(.error(.init(request: request, status: status, message: message)), on: link)
    }

    private func handle(_ packet: [UInt8], link: any Link, environment: NativeDeviceEnvironment) async throws(LinkError) {
        if let current = transfer, current.start.compact,
            let index = NativeMessage.CompactData.index(of: packet, near: current.receiver.nextExpected)
        {
            // A compact data packet: its first byte is in a range no opcode uses.
            let data = NativeMessage.DataPacket(sequence: SequenceNumber.wrap(index), payload: Array(packet.dropFirst()))
            try await handleData(data, link: link, environment: environment)
            return
        }
        let opcode = packet.first ?? 0
        let message: NativeMessage
        do {
            message = try NativeMessage(decoding: packet)
        } catch {
            // A damaged packet is dropped unanswered: its contents cannot be trusted,
            // and a lost data packet is noticed by the gap it leaves.
            if error.field == NativeMessage.checksumField { return }
            // Never answer an error with an error: two confused peers would ping-pong forever.
            guard opcode != NativeMessage.Opcode.error.rawValue else { return }
            let known = NativeMessage.Opcode(rawValue: opcode) != nil || NativeMessage.Opcode(rawValue: opcode & 0x7F) != nil
            try await fail(opcode, known ? .malformed : .unknownOpcode, "\(error)", on: link)
            return
        }
        switch message {
        case .hello(let hello):
            guard hello.minimumVersion <= NativeMessage.version, hello.maximumVersion >= 1,
                hello.minimumVersion <= hello.maximumVersion
            else {
                try await fail(
                    opcode, .unsupportedVersion,
                    "this device speaks protocol version 1…\(NativeMessage.version), the host offered \(hello.minimumVersion)…\(hello.maximumVersion)", on: link)
                return
            }
            let state = storage.snapshot
            try await reply(
                .helloResponse(
                    .init(
                        version: min(hello.maximumVersion, NativeMessage.version), mode: currentMode, capabilities: capabilities,
                        maximumPacket: UInt16(clamping: maximumPacket), bufferCount: UInt16(clamping: bufferCount),
                        slotSize: UInt32(clamping: state.slotSize), firmwareVersion: state.activeVersion, name: name,
                        runningSHA256: capabilities.contains(.delta) ? SHA256Digest.hash(state.activeImage) : nil)), on: link)

        case .enterBootloader:
            if currentMode == .bootloader {
                try await reply(.simpleResponse(request: .enterBootloader, status: .ok), on: link)
                return
            }
            storage.withState { $0.bootToBootloader = true }
            try await reply(.simpleResponse(request: .enterBootloader, status: .ok), on: link)
            await environment.reboot(RebootRequest(toBootloader: true))

        case .start(let start):
            try await handleStart(start, opcode: opcode, link: link)

        case .status(let sha):
            let held = storage.withState { state -> [Range<UInt32>]? in
                guard let staging = state.staging.values.first(where: { $0.start.sha256 == sha }) else { return nil }
                return staging.held.ranges.map { UInt32($0.lowerBound)..<UInt32($0.upperBound) }
            }
            if let held {
                try await reply(.statusResponse(.init(status: .ok, ranges: held)), on: link)
            } else {
                try await reply(.statusResponse(.init(status: .notFound)), on: link)
            }

        case .data(let data):
            try await handleData(data, link: link, environment: environment)

        case .ackRequest:
            guard var current = transfer else {
                try await fail(opcode, .invalidState, "no transfer in progress: send START first", on: link)
                return
            }
            let ack = acknowledgement(&current.receiver, link: link)
            transfer = current
            try await reply(ack, on: link)

        case .ackInterval(let interval):
            guard capabilities.contains(.ackIntervalChange) else {
                try await fail(opcode, .unknownOpcode, "this device keeps the acknowledgement interval START named", on: link)
                return
            }
            guard var current = transfer else {
                try await fail(opcode, .invalidState, "no transfer in progress: send START first", on: link)
                return
            }
            // The transfer's copy of START, not the staging slot's: a resumed transfer starts from what START asks.
            current.start.ackInterval = interval
            transfer = current

        case .verify:
            let result = verify()
            if let current = transfer, current.start.compressed || current.start.deltaBaseSHA256 != nil {
                // Inflating or patching what arrived costs the device's CPU: ~300 ns an output byte
                // (a streaming inflater or patcher on a 64 MHz Cortex-M4, about 3 MB/s).
                let cost = Self.inflateTimePerByte * Int(current.start.imageSize)
                try? await environment.clock.sleep(for: cost)
            }
            try await reply(.verifyResponse(result), on: link)

        case .activate:
            let activated = storage.withState { state -> Bool in
                guard let staging = state.staging[.firmware], staging.verified,
                    let image = Self.image(of: staging, runningImage: state.activeImage)
                else { return false }
                state.activeImage = image
                state.activeVersion = staging.start.label
                state.staging[.firmware] = nil
                state.bootToBootloader = false
                state.activations += 1
                return true
            }
            guard activated else {
                try await fail(opcode, .invalidState, "no verified image to activate: transfer and VERIFY first", on: link)
                return
            }
            transfer = nil
            try await reply(.simpleResponse(request: .activate, status: .ok), on: link)
            await environment.reboot(RebootRequest())

        case .reboot:
            try await reply(.simpleResponse(request: .reboot, status: .ok), on: link)
            await environment.reboot(RebootRequest())

        case .abort:
            if let current = transfer {
                storage.withState { $0.staging[current.target] = nil }
                transfer = nil
            }
            try await reply(.simpleResponse(request: .abort, status: .ok), on: link)

        case .getFile(let request):
            try await handleGetFile(request, link: link, environment: environment)

        case .error:
            return
        case .segment:
            return
        case .helloResponse, .startResponse, .statusResponse, .verifyResponse, .getFileResponse, .simpleResponse, .ack, .nack:
            try await fail(opcode, .invalidState, "a device does not accept \(NativeMessage.Opcode(rawValue: opcode & 0x7F)?.name ?? "this") responses", on: link)
        }
    }

    private func handleStart(_ start: NativeMessage.Start, opcode: UInt8, link: any Link) async throws(LinkError) {
        let slotSize = storage.withState { $0.slotSize }
        if start.target == .firmware && currentMode != .bootloader {
            try await fail(opcode, .invalidState, "firmware transfers need the bootloader: send ENTER_BOOTLOADER first", on: link)
            return
        }
        if start.target == .test && !capabilities.contains(.testTransfer) {
            try await fail(opcode, .badParameter, "this device does not support test transfers", on: link)
            return
        }
        if start.target == .file && !capabilities.contains(.files) {
            try await fail(opcode, .badParameter, "this device has no file store", on: link)
            return
        }
        if Int(start.imageSize) > slotSize || Int(start.streamSize) > slotSize {
            try await fail(opcode, .noSpace, "image of \(start.imageSize) bytes does not fit the \(slotSize)-byte slot", on: link)
            return
        }
        let header = start.compact ? NativeMessage.CompactData.headerSize : NativeMessage.dataHeaderSize
        if Int(start.packetSize) + header > maximumPacket {
            try await fail(opcode, .badParameter, "packet size \(start.packetSize) exceeds this device's maximum of \(maximumPacket - header)", on: link)
            return
        }
        if start.compact && !capabilities.contains(.compactData) {
            try await fail(opcode, .badParameter, "this device does not accept compact data packets", on: link)
            return
        }
        if start.compressed && !capabilities.contains(.deflate) {
            try await fail(opcode, .badParameter, "this device does not accept compressed transfers", on: link)
            return
        }
        if let base = start.deltaBaseSHA256 {
            guard capabilities.contains(.delta), start.target == .firmware else {
                try await fail(opcode, .badParameter, "this device applies delta patches to its firmware only, if at all", on: link)
                return
            }
            let running = storage.withState { SHA256Digest.hash($0.activeImage) }
            guard running == base else {
                // Refused before any byte is sent: a patch only rebuilds the image from the base it was made for.
                try await fail(
                    opcode, .wrongBase,
                    "the patch was made for sha256:\(base.prefix(6).hexString), but this device runs sha256:\(running.prefix(6).hexString)",
                    on: link)
                return
            }
        }
        if start.target == .file && start.label.isEmpty {
            try await fail(opcode, .badParameter, "a file transfer needs a file name", on: link)
            return
        }
        let held: RangeSet = storage.withState { state in
            if let existing = state.staging[start.target], existing.start.sha256 == start.sha256,
                existing.start.compressed == start.compressed, existing.start.streamSize == start.streamSize,
                existing.start.deltaBaseSHA256 == start.deltaBaseSHA256,
                existing.start.label == start.label, capabilities.contains(.resume)
            {
                state.staging[start.target]?.start = start
                state.staging[start.target]?.verified = false
                return existing.held
            }
            if start.target == .firmware { state.erasedPages = [] }
            state.staging[start.target] = DeviceStorage.Staging(
                start: start, bytes: [UInt8](repeating: 0xFF, count: Int(start.streamSize)), held: RangeSet())
            return RangeSet()
        }
        let packetSize = Int(start.packetSize), total = Int(start.streamSize)
        var receiver = ReceiverWindow(packetCount: (total + packetSize - 1) / packetSize)
        receiver.markHeld { held.contains($0 * packetSize..<min(($0 + 1) * packetSize, total)) }
        receiver.restartSession()
        transfer = (start.target, start, receiver)
        try await reply(
            .startResponse(
                .init(
                    status: .ok, ranges: held.ranges.map { UInt32($0.lowerBound)..<UInt32($0.upperBound) })), on: link)
    }

    private func handleData(_ data: NativeMessage.DataPacket, link: any Link, environment: NativeDeviceEnvironment) async throws(LinkError) {
        guard var current = transfer else {
            try await fail(NativeMessage.Opcode.data.rawValue, .invalidState, "data without a transfer: send START first", on: link)
            return
        }
        let packetSize = Int(current.start.packetSize), total = Int(current.start.streamSize)
        switch current.receiver.receive(sequence: data.sequence) {
        case .outOfWindow:
            return
        case .duplicate:
            if current.receiver.isComplete {
                let ack = acknowledgement(&current.receiver, link: link)
                transfer = current
                try await reply(ack, on: link)
            }
            return
        case .new(let index, let gap):
            let offset = index * packetSize
            let expected = min(packetSize, total - offset)
            guard data.payload.count == expected else {
                // Wrong length for its position: treat as damaged, forget we saw it.
                try await fail(
                    NativeMessage.Opcode.data.rawValue, .malformed,
                    "packet \(index) carries \(data.payload.count) bytes, expected \(expected)", on: link)
                return
            }
            let target = current.target
            let newPages: Int = storage.withState { state in
                state.staging[target]?.bytes.replaceSubrange(offset..<offset + expected, with: data.payload)
                state.staging[target]?.held.insert(offset..<offset + expected)
                state.staging[target]?.verified = false
                guard target != .file, environment.flashPageSize > 0 else { return 0 }
                var count = 0
                for page in (offset / environment.flashPageSize)...((offset + expected - 1) / environment.flashPageSize) {
                    // A test transfer costs what writing firmware would, so tuning measures what flashing meets.
                    let fresh =
                        target == .test
                        ? state.staging[target]?.testPages.insert(page).inserted ?? false
                        : state.erasedPages.insert(page).inserted
                    if fresh { count += 1 }
                }
                return count
            }
            if newPages > 0, environment.eraseTimePerPage > .zero {
                try? await environment.clock.sleep(for: environment.eraseTimePerPage * newPages)
            }
            if let gap {
                try await reply(.nack(.init(first: SequenceNumber.wrap(gap.lowerBound), count: UInt16(clamping: gap.count), reason: .gap)), on: link)
            }
            if current.receiver.sinceAcknowledgement >= Int(current.start.ackInterval) || current.receiver.isComplete {
                let ack = acknowledgement(&current.receiver, link: link)
                transfer = current
                try await reply(ack, on: link)
            } else {
                transfer = current
            }
        }
    }

    /// What inflating costs the simulated device per byte of image (about 3 MB/s).
    package static let inflateTimePerByte = Duration.nanoseconds(300)

    /// The image a staging slot holds: inflated if it was sent compressed, rebuilt from `runningImage`
    /// if it was sent as a delta patch; nil if it will not inflate or the patch does not apply.
    static func image(of staging: DeviceStorage.Staging, runningImage: [UInt8]) -> [UInt8]? {
        if staging.start.deltaBaseSHA256 != nil {
            // The base was checked at START; a damaged patch fails here, and VERIFY then refuses.
            guard let header = try? DeltaPatchHeader(reading: staging.bytes), header.newSize == Int(staging.start.imageSize) else { return nil }
            return try? DeltaPatch.apply(staging.bytes, to: runningImage)
        }
        guard staging.start.compressed else { return staging.bytes }
        guard let inflater = try? Inflater(format: .raw),
            let image = try? inflater.update(staging.bytes, limit: Int(staging.start.imageSize)),
            inflater.isFinished
        else { return nil }
        return image
    }

    private func verify() -> NativeMessage.VerifyResult {
        guard let current = transfer else {
            return .init(status: .invalidState, crc32: 0, sha256: [])
        }
        guard current.receiver.isComplete else {
            return .init(status: .invalidState, crc32: 0, sha256: [])
        }
        return storage.withState { state -> NativeMessage.VerifyResult in
            guard let staging = state.staging[current.target] else { return .init(status: .invalidState, crc32: 0, sha256: []) }
            guard let image = Self.image(of: staging, runningImage: state.activeImage) else {
                state.staging[current.target]?.verified = false
                return .init(status: .verifyFailed, crc32: 0, sha256: [])
            }
            let crc = CRC32.checksum(image)
            let sha = SHA256Digest.hash(image)
            let good = image.count == Int(staging.start.imageSize) && crc == staging.start.crc32 && sha == staging.start.sha256
            switch (good, current.target) {
            case (true, .firmware):
                state.staging[.firmware]?.verified = true
            case (true, .file):
                state.files[staging.start.label] = image
                state.staging[.file] = nil
            case (true, .test):
                state.staging[.test] = nil
            case (false, _):
                // Keep nothing that failed: a later START must send it all again.
                state.staging[current.target] = nil
            }
            return .init(status: good ? .ok : .verifyFailed, crc32: crc, sha256: sha)
        }
    }

    private func handleGetFile(_ request: NativeMessage.GetFile, link: any Link, environment: NativeDeviceEnvironment) async throws(LinkError) {
        guard capabilities.contains(.files) else {
            try await fail(NativeMessage.Opcode.getFile.rawValue, .badParameter, "this device has no file store", on: link)
            return
        }
        guard let file = storage.withState({ $0.files[request.name] }) else {
            try await reply(.getFileResponse(.init(status: .notFound, size: 0, crc32: 0, sha256: [])), on: link)
            return
        }
        let packetSize = Int(request.packetSize)
        guard packetSize + NativeMessage.dataHeaderSize <= link.parameters.maximumPayload else {
            try await fail(
                NativeMessage.Opcode.getFile.rawValue, .badParameter,
                "packet size \(packetSize) exceeds the link's maximum of \(link.parameters.maximumPayload - NativeMessage.dataHeaderSize)", on: link)
            return
        }
        try await reply(
            .getFileResponse(
                .init(
                    status: .ok, size: UInt32(file.count), crc32: CRC32.checksum(file),
                    sha256: SHA256Digest.hash(file))), on: link)
        let tuning = TransferTuning(window: Int(request.window), ackInterval: Int(request.ackInterval))
        let engine = TransferEngine(stream: file, packetSize: packetSize, wire: NativeWire(), tuning: tuning, clock: environment.clock)
        do {
            try await engine.run(over: link)
        } catch let error as LinkError {
            throw error
        } catch {
            logger.debug("pull of \(request.name) ended: \(error)")
        }
    }
}
