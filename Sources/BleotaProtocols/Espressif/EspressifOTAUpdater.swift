import BleotaCodec
import BleotaEngine
import BleotaLink

/// The host half of ``EspressifOTAProtocol``: START with the length → sectors
/// of 4 KiB in packets, up to the device's sector window ahead → each sector
/// acknowledged, resent on a CRC error and from the device's expected index on
/// an index error → STOP → the device restarts into the new image.
///
/// The device finishes when the length START announced has arrived, not at
/// STOP, and reports a failed validation to nobody: bleota checks the image
/// (magic byte, appended SHA-256) before it sends anything, and takes a device
/// that does not restart after its last sector as having refused the image.
package struct EspressifOTAUpdater: ContextHost {
    package let context: HostContext

    package init(context: HostContext) { self.context = context }

    var tries: Int { context.tries(default: 4) }

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        guard let (patch, source) = try deltaPatch(for: prepared) else { return try await update(prepared, sending: prepared.bytes) }
        do throws(TransferError) {
            return try await update(prepared, sending: patch, patchBase: source)
        } catch {
            // The device takes a patch silently or not at all: no restart after it means the
            // device runs another image than the base (or does not apply patches). It still runs
            // its old image, so auto sends the whole image; always reports it.
            guard error.code == .verificationFailed, error.step == .activate, prepared.deltaBase?.policy == .auto else { throw error }
            context.onEvent(.note("\(device) did not restart after the patch against \(source): sending the whole image"))
            return try await update(prepared, sending: prepared.bytes)
        }
    }

    /// The `esp_delta_ota` patch to send instead of the image (the header naming the base's SHA-256 as
    /// the device computes it), when a base is given and the patch saves 10 % or more; nil otherwise,
    /// saying why. Espressif's BLE OTA does not say what a device runs, so the base is only `--base`'s:
    /// a device that runs another image refuses the patch by its header and keeps its own.
    func deltaPatch(for prepared: PreparedImage) throws(TransferError) -> (patch: [UInt8], source: String)? {
        guard let base = prepared.deltaBase, base.policy != .never else { return nil }
        guard case .image(let baseBytes, let source) = base.origin else {
            guard base.policy == .auto else {
                throw TransferError(
                    .unsupported, step: .load,
                    "--delta always: Espressif's BLE OTA does not report the image a device runs, so bleota cannot look it up: give --base the image it runs")
            }
            context.logger.info("sending the whole image: Espressif's BLE OTA does not report the image a device runs; --base names one")
            return nil
        }
        let image = prepared.bytes
        let patch = DeltaPatch.create(from: baseBytes, to: image, espBaseSHA256: DeltaPatch.espBaseSHA256(of: baseBytes))
        guard base.policy == .always || patch.count * 10 < image.count * 9 else {
            context.onEvent(.note("sending the whole image: a patch of \(patch.count) bytes would save under 10 % of \(image.count)"))
            return nil
        }
        context.onEvent(
            .note(
                String(
                    format: "sending an esp_delta_ota patch: %d bytes for the %d-byte image (%.1f %%), against %@", patch.count, image.count,
                    100 * Double(patch.count) / Double(max(1, image.count)), source)))
        return (patch, source)
    }

    /// Sends `payload` (the image, or a patch that rebuilds it on the device) and waits for the restart.
    func update(_ prepared: PreparedImage, sending payload: [UInt8], patchBase: String? = nil) async throws(TransferError) -> UpdateReport {
        var steps = FlashSteps(host: self, prepared: prepared, payload: payload, patchBase: patchBase)
        var machine = UpdateStateMachine(expectedVersion: prepared.version, applicationReceives: true)
        return try await machine.run(&steps)
    }

    /// An update's steps as Espressif's BLE OTA performs them, for the engine's lifecycle: the
    /// application takes the sectors itself, validates the image silently and restarts into it
    /// (the restart is the only verdict), and its coming back is the confirmation.
    struct FlashSteps: SilentReturnSteps {
        let host: EspressifOTAUpdater
        let prepared: PreparedImage
        /// The image, or the patch that rebuilds it on the device.
        let payload: [UInt8]
        /// What the patch is against, when one is sent.
        let patchBase: String?
        var recorder: OperationRecorder
        /// A retry after every sector went out may follow the device's restart into the image:
        /// it reports nothing, so from then on what it runs is unknown (UpdateTries keeps that).
        var tries: UpdateTries
        var link: (any Link)?
        var statistics = TransferStatistics()
        var transferTime = Duration.zero
        var window = 0
        var packetData = 0

        init(host: EspressifOTAUpdater, prepared: PreparedImage, payload: [UInt8], patchBase: String?) {
            self.host = host
            self.prepared = prepared
            self.payload = payload
            self.patchBase = patchBase
            recorder = host.context.recorder("flash")
            recorder.beginQuietly(.load)
            tries = UpdateTries(limit: host.tries)
        }

        var context: HostContext { host.context }
        var clock: any BleotaClock { host.clock }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            link = try await context.connect(.initial, step: .connect)
            return .application
        }

        mutating func transfer() async throws(TryFailure) {
            let began = clock.now
            defer { transferTime += clock.now - began }
            do throws(TryFailure) {
                (window, packetData) = try await host.upload(payload, on: link!, statistics: &statistics)
            } catch {
                await link?.close()
                throw error
            }
        }

        mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) {
            statistics.reconnects += 1
            context.onEvent(.note("\(retry.reason): connecting again and starting over (the device forgets an upload at a disconnect)"))
            recorder.enter(.reconnect)
            link = try await context.connect(.resume, step: .reconnect)
        }

        mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError {
            TransferError(.linkLost, step: .transfer, "\(retry.reason), \(attempts) times: move closer to the device")
        }

        /// The device validates and restarts by itself 200 ms after its last sector; STOP is a courtesy.
        mutating func activate() async throws(TransferError) -> Bool {
            guard let link else { return true }
            try? await link.send(channel: EspressifOTAChannel.command.rawValue, EspressifCommand.stop.encode())
            let restarted = await host.waitForRestart(link, within: host.timeouts.verify)
            await link.close()
            self.link = nil
            guard restarted else {
                let device = host.device
                let why =
                    if let patchBase {
                        "\(device) took every sector of the patch but did not restart: it runs another image than \(patchBase), or does not apply esp_delta_ota patches (it reports nothing over BLE); give --base the image it runs, or use --delta auto"
                    } else {
                        "\(device) took every sector but did not restart: its esp_ota_end refused the image (it reports nothing over BLE); check the image with esptool.py image_info"
                    }
                // After a try that may have been taken (its last answers lost, the device restarted into the
                // image), a patch sent again no longer fits what runs, and nobody can say which image that is.
                let earlier =
                    tries.mayHaveActivated ? " (an earlier try may have been taken: the device may run the new image already)" : ""
                var error = TransferError(.verificationFailed, step: .activate, why + earlier)
                error.outcome = tries.outcomeAfterFailure
                throw error
            }
            return true
        }

        mutating func finish() async -> UpdateReport {
            recorder.versionAfter = prepared.version
            var tuning = context.tuning
            tuning.window = window
            tuning.packetSize = packetData
            return recorder.finish(
                bytes: prepared.bytes.count,
                transfer: TransferSummary(
                    streamBytes: statistics.bytesOnWire, delta: patchBase != nil, packetSize: packetData, elapsed: transferTime),
                statistics: statistics, tuning: tuning)
        }
    }

    /// True once the link drops (the restart), false when it is still up after `timeout`.
    func waitForRestart(_ link: any Link, within timeout: Duration) async -> Bool {
        let deadline = clock.now + timeout
        while deadline > clock.now {
            do {
                guard try await link.receiveMessage(within: deadline - clock.now, clock: clock) != nil else { return false }
            } catch { return true }
        }
        return false
    }

    /// The next command acknowledgement for `command`, or nil after the response time.
    func commandAck(_ command: UInt16, on link: any Link) async throws(LinkError) -> EspressifCommandAck? {
        let deadline = clock.now + timeouts.response
        while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
            guard case .packet(let channel, let payload) = packet, channel == EspressifOTAChannel.command.rawValue,
                let ack = try? EspressifCommandAck(decoding: payload), ack.command == command
            else { continue }
            return ack
        }
        return nil
    }

    /// The shortest wait for a sector acknowledgement (a link's supervision hiccup, a longer flash write).
    static let shortestSectorWait = Duration.milliseconds(250)

    /// START, then every sector acknowledged; returns the window and data bytes per packet used.
    func upload(_ image: [UInt8], on link: any Link, statistics: inout TransferStatistics) async throws(TryFailure) -> (Int, Int) {
        let sectorSize = EspressifOTADevice.sectorSize
        // Data bytes per packet after the 3-byte header (a sector's last packet also carries the 2-byte CRC).
        let data = link.parameters.dataPerPacket(after: 1 + 3, asked: context.askedPacketSize)
        guard data > 2 else { throw .final(TransferError(.unsupported, step: .transfer, "the link's packets are too small for Espressif's 5 bytes of header and CRC")) }
        let sectors = (image.count + sectorSize - 1) / sectorSize
        // Set once every sector has gone out (read where a dropped link is caught).
        var sentEverySector = false
        guard sectors <= Int(UInt16.max) else { throw .final(TransferError(.badInput, step: .load, "the image has more sectors than a 16-bit index counts")) }
        do {
            // The last refusal, kept for the error when no later try is accepted.
            var refused: EspressifCommandAck?
            let answered = try await RequestPolicy(timeouts).tries(on: clock) { (_) async throws(LinkError) -> EspressifCommandAck? in
                try await link.send(channel: EspressifOTAChannel.command.rawValue, EspressifCommand.start(length: UInt32(image.count)).encode())
                guard let ack = try await commandAck(EspressifCommand.startID, on: link) else { return nil }
                if ack.accepted { return ack }
                // Refused: a START of ours may have arrived after all (its answer lost) or been damaged
                // on the way; STOP clears an upload in progress, then START again.
                refused = ack
                try await link.send(channel: EspressifOTAChannel.command.rawValue, EspressifCommand.stop.encode())
                _ = try await commandAck(EspressifCommand.stopID, on: link)
                return nil
            }
            let ack = answered ?? refused
            guard let ack else { throw TryFailure.retry("\(device) did not answer START") }
            guard ack.accepted else {
                throw TryFailure.final(
                    TransferError(
                        .deviceRefused, step: .transfer,
                        "\(device) refused START for \(image.count) bytes: the image is larger than its OTA partition, or an upload is already running there"))
            }
            var flight = EspressifSectorFlight(
                announcedSectors: Int(max(1, ack.window)),
                fixedSectors: context.explicitKnobs.contains(.window) ? max(1, min(64, context.tuning.window)) : nil)
            // Which sector goes next and where a gap or a silence sends from again: the engine's go-back-N.
            var sender = GoBackSender(unitCount: sectors, window: flight.sectors)
            var resyncs = 0
            var wentBackTo = -1
            var stalled = 0
            var delay = context.explicitKnobs.contains(.delay) ? context.tuning.interPacketDelay : .zero
            // Sectors written since the last loss.
            var clean = 0
            /// Packets are being lost: fewer sectors in flight, then, when a sector alone is lost again
            /// before another is written (a device that cannot take a sector back to back, not one
            /// loss on air), a pause between packets.
            func lost() {
                let again = clean == 0
                clean = 0
                if !flight.lost(), again, !context.explicitKnobs.contains(.delay) {
                    delay = min(.milliseconds(40), max(.milliseconds(2), delay * 2))
                }
            }
            // When the last sector acknowledgement came, and the gaps between the last few: a sector whose
            // last packet was lost is never answered, and the device's own pace says sooner than the
            // response timeout that nothing more will come.
            var lastAckAt: Duration?
            var ackGaps = RecentAnswerWait()
            func ackTimeout() -> Duration {
                if context.explicitKnobs.contains(.ackTimeout) { return context.tuning.ackTimeout }
                return ackGaps.wait(atLeast: Self.shortestSectorWait, atMost: timeouts.response)
            }
            while !sender.isComplete {
                sender.window = flight.sectors
                while let sector = sender.unitToSend {
                    try await send(sector: sector, of: image, data: data, delay: delay, on: link, statistics: &statistics, resend: sector < sender.highest)
                    sender.sent()
                    if sender.sentEveryUnit { sentEverySector = true }
                }
                // Answers that move nothing on, however many, end the try.
                stalled += 1
                guard stalled < 64 else { throw TryFailure.retry("\(device) made no progress in 64 answers and waits", mayHaveActivated: sender.sentEveryUnit) }
                let waited = ackTimeout()
                guard let packet = try await link.receiveMessage(within: waited, clock: clock) else {
                    statistics.ackTimeouts += 1
                    context.logger.debug("no sector acknowledged in \(waited) with sectors \(sender.base)..<\(sender.next) out: sending from \(sender.base) again")
                    let silent = sender.waitedInVain()
                    guard silent < max(2, timeouts.attempts) else {
                        throw TryFailure.retry("\(device) acknowledged no sector in \(silent) waits", mayHaveActivated: sender.sentEveryUnit)
                    }
                    lost()
                    continue
                }
                guard case .packet(let channel, let payload) = packet, channel == EspressifOTAChannel.firmware.rawValue,
                    let sectorAck = try? EspressifSectorAck(decoding: payload)
                else { continue }
                sender.answered()
                statistics.acknowledgements += 1
                let acked = Int(sectorAck.sector)
                switch sectorAck.status {
                case .success:
                    resyncs = 0
                    if sender.acknowledged(before: acked + 1) {
                        stalled = 0
                        flight.acknowledged()
                        // A pause that 8 sectors in a row did without is halved, down to the first
                        // step's 2 ms: a loss on air doubles it as a flooded device does, and one
                        // such loss should not slow the rest of the upload.
                        clean += 1
                        if clean >= 8, delay > .milliseconds(2), !context.explicitKnobs.contains(.delay) {
                            clean = 0
                            delay = max(.milliseconds(2), delay / 2)
                        }
                        let now = clock.now
                        if let lastAckAt { ackGaps.add(now - lastAckAt) }
                        lastAckAt = now
                    }
                    context.onEvent(
                        .progress(
                            TransferProgress(
                                bytesAcknowledged: min(image.count, sender.base * sectorSize), totalBytes: image.count,
                                packetsSent: statistics.packetsSent, packetsResent: statistics.packetsResent,
                                packetsLost: statistics.packetsLost, elapsed: .zero, window: flight.sectors, interPacketDelay: delay)))
                case .crcError, .payloadLengthError, .sectorIndexError:
                    statistics.negativeAcknowledgements += 1
                    let from = sectorAck.status == .sectorIndexError ? Int(sectorAck.expected) : acked
                    context.logger.debug("sector \(acked) answered \(sectorAck.status) (expected \(sectorAck.expected)) with sectors \(sender.base)..<\(sender.next) out")
                    // Sectors sent ahead of a spoiled one are each answered "expected the spoiled one":
                    // after going back there once, those answers are stale.
                    if sectorAck.status == .sectorIndexError, from == wentBackTo, acked != from { continue }
                    // A sector already acknowledged, or not out now: a stale answer.
                    guard sender.missing(from: from) != nil else { continue }
                    resyncs += 1
                    guard resyncs <= 10 else { throw TryFailure.retry("\(device) answered \(sectorAck.status) ten times in a row", mayHaveActivated: sender.sentEveryUnit) }
                    statistics.packetsLost += 1
                    wentBackTo = from
                    lost()
                }
            }
            return (flight.sectors, data)
        } catch let failure as TryFailure {
            throw failure
        } catch let error as LinkError {
            throw .retry("the link dropped during the transfer (\(error))", mayHaveActivated: sentEverySector)
        } catch {
            throw .retry("the transfer was interrupted", mayHaveActivated: sentEverySector)
        }
    }

    func send(sector: Int, of image: [UInt8], data: Int, delay: Duration, on link: any Link, statistics: inout TransferStatistics, resend: Bool) async throws(LinkError) {
        let sectorSize = EspressifOTADevice.sectorSize
        let bytes = image[(sector * sectorSize)..<min(image.count, (sector + 1) * sectorSize)]
        let crc = EspressifCRC.of(bytes)
        var offset = bytes.startIndex
        var sequence: UInt8 = 0
        var last = false
        while !last {
            // The last packet holds what is left once it fits beside the CRC.
            last = bytes.endIndex - offset <= data - 2
            let end = last ? bytes.endIndex : min(bytes.endIndex, offset + data)
            let packet = EspressifFirmwarePacket(
                sector: UInt16(sector), sequence: last ? EspressifFirmwarePacket.lastSequence : sequence,
                data: bytes[offset..<end], sectorCRC: last ? crc : nil)
            let encoded = packet.encode()
            try await link.send(channel: EspressifOTAChannel.firmware.rawValue, encoded)
            statistics.packetsSent += 1
            if resend { statistics.packetsResent += 1 }
            statistics.bytesOnWire += encoded.count
            if delay > .zero { try? await clock.sleep(for: delay) }
            sequence &+= 1
            offset = end
        }
    }
}
