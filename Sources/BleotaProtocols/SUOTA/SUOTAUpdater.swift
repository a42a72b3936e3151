import BleotaCodec
import BleotaEngine
import BleotaLink

/// The host half of ``SUOTAProtocol`` over GATT: read the 1.3 characteristics
/// → MEM_DEV 0x13000000 (IMG_STARTED) → PATCH_LEN → each block in PATCH_DATA
/// writes, acknowledged CMP_OK → END (CMP_OK, or CRC_ERR) → REBOOT → the device
/// seen back.
///
/// SUOTA cannot resend inside an upload: a write lost in a block leaves the
/// device waiting for bytes that the next block then fills, so a block not
/// acknowledged in time, a CRC_ERR at END or a dropped link (which restarts
/// the device with its old image) start the upload over from MEM_DEV, with
/// smaller blocks and a pause per write, up to `retries` times.
package struct SUOTAUpdater: ContextHost {
    package let context: HostContext

    package init(context: HostContext) { self.context = context }

    var tries: Int { context.tries(default: 4) }

    struct Pace {
        var chunksPerBlock: Int
        var delay: Duration
        /// The image on the LE credit-based channel the device publishes (SUOTA 1.2+), not in PATCH_DATA writes.
        var overCreditChannel = false
    }

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        let transport = context.options[SUOTAProtocol.HostOptions.transport]
        var steps = FlashSteps(host: self, prepared: prepared, transport: transport)
        var machine = UpdateStateMachine(expectedVersion: prepared.version, applicationReceives: true)
        return try await machine.run(&steps)
    }

    /// An update's steps as SUOTA performs them, for the engine's lifecycle: the application
    /// takes the image itself, END is the verification, REBOOT the activation, and the device
    /// coming back the confirmation (SUOTA does not say what runs).
    struct FlashSteps: SilentReturnSteps {
        let host: SUOTAUpdater
        let file: [UInt8]
        /// The file and SuotaLib's trailing XOR byte.
        let image: [UInt8]
        let version: String
        let transport: TransportKind?
        var recorder: OperationRecorder
        var tries: UpdateTries
        var link: (any Link)?
        var statistics = TransferStatistics()
        var transferTime = Duration.zero
        var pace: Pace
        var chunk = 0
        /// An END went out in some try: a later SAME_IMG_ERR means it took.
        var endSent = false
        /// The device took the image in an earlier try whose END answer was lost.
        var alreadyTaken = false

        init(host: SUOTAUpdater, prepared: PreparedImage, transport: TransportKind?) {
            let context = host.context
            self.host = host
            file = prepared.bytes
            // SuotaLib's habit, kept: one byte, the XOR of the file, follows it (DA1458x checks it; later chips ignore it).
            image = file + [file.reduce(UInt8(0), ^)]
            version = prepared.version
            self.transport = transport
            recorder = context.recorder("flash")
            recorder.beginQuietly(.load)
            tries = UpdateTries(limit: host.tries)
            pace = Pace(
                chunksPerBlock: context.explicitKnobs.contains(.window) ? max(1, context.tuning.window) : 6,
                delay: context.explicitKnobs.contains(.delay) ? context.tuning.interPacketDelay : .zero)
        }

        var context: HostContext { host.context }
        var clock: any BleotaClock { host.clock }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            let link = try await context.connect(.initial, step: .connect)
            self.link = link
            // The credit-based channel where the device publishes one and this host can open it, unless told otherwise.
            if transport != .ble {
                pace.overCreditChannel = try await context.request(DirectoryRequest(), on: link, step: .connect).contains(SUOTAChannel.creditData)
            }
            return .application
        }

        mutating func transfer() async throws(TryFailure) {
            let began = clock.now
            defer { transferTime += clock.now - began }
            do throws(TryFailure) {
                chunk = try await host.upload(image, on: link!, pace: pace, statistics: &statistics)
            } catch {
                try await settle(error)
            }
        }

        mutating func verify() async throws(TryFailure) -> (ok: Bool, detail: String) {
            guard !alreadyTaken else { return (true, "") }
            let began = clock.now
            defer { transferTime += clock.now - began }
            endSent = true
            do throws(TryFailure) {
                // An END whose answer is lost may have been taken: the device may commit the image.
                do throws(TryFailure) {
                    try await host.command(.end, expecting: .completeOK, on: link!, step: .verify, within: host.timeouts.verify)
                } catch .again(var retry) {
                    retry.mayHaveActivated = true
                    throw .again(retry)
                }
            } catch {
                try await settle(error)
            }
            return (true, "")
        }

        /// A try that failed: the device leaves SUOTA. SAME_IMG_ERR after an END whose answer was
        /// lost means that END took and the device restarted into the image (refusal(_:step:) marks
        /// SAME_IMG_ERR so): the update goes on to its REBOOT; anything else is the try's failure.
        mutating func settle(_ error: TryFailure) async throws(TryFailure) {
            await host.abort(link!)
            guard case .final(let failure) = error, failure.outcome == .newImageConfirmed, endSent else { throw error }
            context.onEvent(.note("\(host.device) already runs this image: the END of an earlier try took, though its answer was lost"))
            do throws(TransferError) { link = try await context.connect(.resume, step: .reconnect) } catch { throw .final(error) }
            alreadyTaken = true
        }

        mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) {
            let why = retry.reason
            statistics.reconnects += 1
            if pace.overCreditChannel {
                // Nothing acknowledges data on the credit-based channel: the blocks over GATT do.
                pace.overCreditChannel = false
                context.onEvent(.note("\(why); starting the upload again over GATT, in acknowledged blocks"))
            } else {
                pace.chunksPerBlock = max(1, pace.chunksPerBlock / 2)
                if !context.explicitKnobs.contains(.delay) { pace.delay = min(.milliseconds(40), max(.milliseconds(2), pace.delay * 2)) }
                context.onEvent(.note("\(why); starting the upload again with smaller blocks"))
            }
            recorder.enter(.reconnect)
            link = try await context.connect(.resume, step: .reconnect)
        }

        mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError {
            TransferError(
                .verificationFailed, step: .transfer,
                "the image did not arrive whole in \(attempts) tries (\(retry.reason)): try --delay 10ms or move closer to the device")
        }

        mutating func activate() async throws(TransferError) -> Bool {
            try? await link?.send(channel: SUOTAChannel.memoryDevice.rawValue, SUOTAMemoryCommand.reboot.encode())
            if let link { await context.awaitDisconnect(link) }
            link = nil
            return true
        }

        mutating func finish() async -> UpdateReport {
            recorder.versionAfter = version
            var tuning = context.tuning
            tuning.window = pace.chunksPerBlock
            tuning.packetSize = chunk
            tuning.interPacketDelay = pace.delay
            return recorder.finish(
                bytes: file.count, transfer: TransferSummary(streamBytes: statistics.bytesOnWire, packetSize: chunk, elapsed: transferTime),
                statistics: statistics, tuning: tuning)
        }
    }

    /// MEM_DEV 0xFF000000, then the link closed: the device leaves SUOTA (or restarts, having lost the link).
    func abort(_ link: any Link) async {
        try? await link.send(channel: SUOTAChannel.memoryDevice.rawValue, SUOTAMemoryCommand.abort.encode())
        await link.close()
    }

    /// Reads a readable characteristic; nil when the device lacks it or does not answer.
    func read(_ channel: SUOTAChannel, on link: any Link) async throws(LinkError) -> [UInt8]? {
        try await link.send(message: .read(channel: channel.rawValue))
        let deadline = clock.now + timeouts.response
        while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
            if case .packet(let number, let value) = packet, number == channel.rawValue { return Array(value) }
        }
        return nil
    }

    /// The next SERV_STATUS notification, or nil after `timeout`.
    func status(on link: any Link, within timeout: Duration) async throws(LinkError) -> UInt8? {
        let deadline = clock.now + timeout
        while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
            if case .packet(let number, let value) = packet, number == SUOTAChannel.status.rawValue, value.count == 1 { return value.first }
        }
        return nil
    }

    /// A MEM_DEV command and the status it must bring; another status is the device's refusal.
    func command(
        _ command: SUOTAMemoryCommand, expecting expected: SUOTAStatus, on link: any Link, step: UpdateStep,
        within timeout: Duration
    ) async throws(TryFailure) {
        do {
            try await link.send(channel: SUOTAChannel.memoryDevice.rawValue, command.encode())
            guard let status = try await status(on: link, within: timeout) else {
                throw TryFailure.retry("\(device) did not answer MEM_DEV 0x\(String(command.value, radix: 16, uppercase: true))")
            }
            guard status == expected.rawValue else { throw refusal(status, step: step) }
        } catch let failure as TryFailure {
            throw failure
        } catch {
            throw TryFailure.retry("the link dropped (\(error))")
        }
    }

    /// A status other than the one expected: a lost write (CRC_ERR, PATCH_LEN_ERR) is worth another try, a refusal is final.
    func refusal(_ raw: UInt8, step: UpdateStep) -> TryFailure {
        switch SUOTAStatus(rawValue: raw) {
        case .crcError?, .patchLengthError?:
            return .retry("\(device) answered \(SUOTAStatus.name(raw))")
        case .sameImage?:
            var failure = TransferError(.deviceRefused, step: step, "\(device) refused the update: \(SUOTAStatus.name(raw)): nothing to do")
            // The outcome marks it: flash(_:mode:) tells an earlier try's END that took by it.
            failure.outcome = .newImageConfirmed
            return .final(failure)
        default:
            return .final(TransferError(.deviceRefused, step: step, "\(device) refused the update: \(SUOTAStatus.name(raw))"))
        }
    }

    /// MEM_DEV, PATCH_LEN and every block; returns the bytes per PATCH_DATA write.
    func upload(_ image: [UInt8], on link: any Link, pace: Pace, statistics: inout TransferStatistics) async throws(TryFailure) -> Int {
        do {
            let advertised = try await read(.patchDataSize, on: link).flatMap { SUOTAWire.read($0) }.map(Int.init)
            // Without SUOTA 1.3's PATCH_DATA_CHAR_SIZE, 20 bytes, as every host does.
            var chunk = min(advertised ?? 20, link.parameters.maximumPayload - 1)
            if context.explicitKnobs.contains(.packetSize), let chosen = context.tuning.packetSize { chunk = min(chunk, chosen) }
            guard chunk > 0 else { throw TryFailure.final(TransferError(.unsupported, step: .transfer, "the link carries no PATCH_DATA bytes")) }
            try await command(.spiFlash(bank: 0), expecting: .imageStarted, on: link, step: .transfer, within: timeouts.response)
            if pace.overCreditChannel {
                try await uploadOverCreditChannel(image, on: link, statistics: &statistics)
                return link.parameters.preferredPayload - 1
            }
            // The first block holds the whole header (the device checks it there).
            let block = max(chunk * pace.chunksPerBlock, SUOTAImageHeader.size)
            var currentLength = -1
            var offset = 0
            while offset < image.count {
                let length = min(block, image.count - offset)
                if length != currentLength {
                    try await link.send(channel: SUOTAChannel.patchLength.rawValue, SUOTAWire.u16(UInt16(length)))
                    currentLength = length
                }
                var sent = 0
                while sent < length {
                    let size = min(chunk, length - sent)
                    try await link.send(channel: SUOTAChannel.patchData.rawValue, image[(offset + sent)..<(offset + sent + size)])
                    statistics.packetsSent += 1
                    statistics.bytesOnWire += size
                    sent += size
                    if pace.delay > .zero { try? await clock.sleep(for: pace.delay) }
                }
                guard let status = try await status(on: link, within: timeouts.response) else {
                    statistics.ackTimeouts += 1
                    throw TryFailure.retry("\(device) did not acknowledge the block at byte \(offset) (a write was lost)")
                }
                guard status == SUOTAStatus.completeOK.rawValue else { throw refusal(status, step: .transfer) }
                statistics.acknowledgements += 1
                offset += length
                context.onEvent(
                    .progress(
                        TransferProgress(
                            bytesAcknowledged: min(offset, image.count - 1), totalBytes: image.count - 1,
                            packetsSent: statistics.packetsSent, packetsResent: statistics.packetsResent,
                            packetsLost: statistics.packetsLost, elapsed: .zero, window: pace.chunksPerBlock,
                            interPacketDelay: pace.delay)))
            }
            // The status byte names no block, so a doubled write or a late CMP_OK can pass for a block's
            // answer; the byte count the device keeps cannot (SUOTA 1.3's MEM_INFO). The read also
            // lets every earlier notification arrive, so END's answer is END's.
            if let counted = try await read(.memoryInfo, on: link).flatMap({ SUOTAWire.read($0) }), Int(counted) != image.count {
                throw TryFailure.retry("\(device) counted \(counted) bytes where bleota sent \(image.count)")
            }
            return chunk
        } catch let failure as TryFailure {
            throw failure
        } catch {
            throw TryFailure.retry("the link dropped during the transfer (\(error))")
        }
    }

    /// The image as SDUs on the credit-based channel after IMG_STARTED (DA1468x's `suota_l2cap`):
    /// no PATCH_LEN and no CMP_OK — the credits pace it, and MEM_INFO's count, read until it stops
    /// growing, says whether every byte arrived (the ATT read may overtake SDUs still in the device's queue).
    func uploadOverCreditChannel(_ image: [UInt8], on link: any Link, statistics: inout TransferStatistics) async throws(TryFailure) {
        do {
            let sdu = link.parameters.preferredPayload - 1
            var offset = 0
            while offset < image.count {
                let end = min(image.count, offset + sdu)
                try await link.send(channel: SUOTAChannel.creditData, image[offset..<end])
                statistics.packetsSent += 1
                statistics.bytesOnWire += end - offset
                offset = end
                if statistics.packetsSent % 16 == 0 || offset == image.count {
                    context.onEvent(
                        .progress(
                            TransferProgress(
                                bytesAcknowledged: offset, totalBytes: image.count, packetsSent: statistics.packetsSent,
                                packetsResent: statistics.packetsResent, packetsLost: statistics.packetsLost,
                                elapsed: .zero, window: 1, interPacketDelay: .zero)))
                }
            }
            var counted: UInt32 = 0
            var lastGrowth = clock.now
            while Int(counted) < image.count {
                guard let value = try await read(.memoryInfo, on: link).flatMap({ SUOTAWire.read($0) }) else {
                    throw TryFailure.retry("\(device) did not answer a read of MEM_INFO")
                }
                if value > counted { lastGrowth = clock.now }
                counted = value
                guard Int(counted) < image.count else { break }
                guard clock.now - lastGrowth < timeouts.response else { break }
                try? await clock.sleep(for: .milliseconds(50))
            }
            guard Int(counted) == image.count else {
                statistics.packetsLost += 1
                throw TryFailure.retry("\(device) counted \(counted) bytes where bleota sent \(image.count) on the credit-based channel")
            }
            statistics.acknowledgements += 1
        } catch let failure as TryFailure {
            throw failure
        } catch {
            throw TryFailure.retry("the link dropped during the transfer (\(error))")
        }
    }
}
