import BleotaCodec
import BleotaEngine
import BleotaLink

/// The host half of ``SiliconLabsOTAProtocol``, as Silicon Labs' own hosts
/// run it (the NCP OTA host, Simplicity Connect): OTA Control 0x00 in the
/// application → the device resets into its AppLoader (same address, named
/// "OTA") → reconnect → 0x00 begins → the GBL file in writes without response
/// → 0x03, whose Write Response is the AppLoader's verdict → 0x04 → the device
/// boots the new application, whose version is read back.
///
/// The AppLoader takes the file as one stream with no offsets and answers only
/// at the end, so a write lost on the way costs the whole try: bleota reads
/// the OTA version every `window` writes (the answer comes after the writes
/// before it, which paces the stream to what the device takes), and after a
/// CRC_ERROR or a dropped link begins again from 0x00 with a smaller window
/// and a pause between writes. Refusals of the file itself (NOT_SUPPORTED,
/// IMAGE_TOO_BIG, …) end the update with the device's name for them.
package struct SiliconLabsOTAUpdater: ContextHost {
    package let context: HostContext

    package init(context: HostContext) { self.context = context }

    var tries: Int { context.tries(default: 4) }

    /// Writes between two reads of the OTA version, unless `--window` says otherwise.
    static let defaultWindow = 16

    /// How one try sends: bytes per write, writes between reads, the pause after each write, and
    /// how many reads may be unanswered while the next writes go out.
    struct Pace {
        var packetSize: Int
        var window: Int
        var delay: Duration
        /// Reads unanswered at most: 2 at first (a window is on its way while the one before it
        /// is confirmed).
        var readsAhead = 2
        /// Reads ahead grow by one per answer from one, rather than starting at `readsAhead`: a
        /// device that takes little at a time gets no burst of several windows at the start.
        var rampsReads = false

        /// Whether reads go unanswered while the next writes go out.
        var pipelined: Bool { readsAhead > 1 }

        /// After the first failed try: one write per read, up to three reads unanswered, reached
        /// one answer at a time. A device slower than its link (on `slow-flash` the AppLoader
        /// programs a write in 7.2 ms, 2 an event, with a queue of 4) then has a write and a read
        /// arriving each answer apart, which its queue takes as it works, and is never idle for a
        /// round trip: 21.2 KiB/s for that try on `slow-flash`, where a read answered before every
        /// 3 writes (what this step did before) made 15.8. Reads cost the device time and queue
        /// room, so this is at most 1.5 writes an event there, 72 % of the ceiling. After further
        /// failures: each read answered before more go out, at most 3 writes between reads (with
        /// the read, what a 4-packet queue holds), then half the window; a pause of 2 ms from the
        /// second failure, doubling to 40 ms.
        mutating func slowDown() {
            if !rampsReads, readsAhead > 1 {
                window = 1
                readsAhead = SiliconLabsOTAUpdater.slowDeviceReadsAhead
                rampsReads = true
                return
            }
            if readsAhead > 1 {
                readsAhead = 1
                rampsReads = false
                window = 3
            } else {
                window = max(1, window / 2)
            }
            delay = delay == .zero ? .milliseconds(2) : min(.milliseconds(40), delay * 2)
        }
    }

    /// Reads unanswered at most after a failed try, with one write each.
    static let slowDeviceReadsAhead = 3

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        var steps = FlashSteps(host: self, prepared: prepared)
        var machine = UpdateStateMachine(expectedVersion: prepared.version, applicationReceives: true)
        return try await machine.run(&steps)
    }

    /// An update's steps as Silicon Labs' hosts perform them, for the engine's lifecycle. Each
    /// try of the transfer starts where the device is: in its application it is first sent to
    /// its AppLoader (a failed try can leave it back in the application: a power cut in the
    /// AppLoader boots an intact one), and the file's 0x03, whose Write Response is the
    /// AppLoader's verdict, ends it. 0x04 activates; the application version read back confirms.
    struct FlashSteps: RecordedLifecycleSteps {
        let host: SiliconLabsOTAUpdater
        let image: [UInt8]
        let version: String
        /// The application version the GBL file carries.
        let targetVersion: UInt32
        var recorder: OperationRecorder
        var tries: UpdateTries
        var link: (any Link)?
        /// The channels the device offers now: OTA Data only in its AppLoader.
        var offered: Set<UInt8> = []
        var versionBefore: UInt32?
        var pace = Pace(packetSize: 244, window: SiliconLabsOTAUpdater.defaultWindow, delay: .zero)
        var statistics = TransferStatistics()
        var transferTime = Duration.zero
        /// Tries begun so far.
        var attempt = 0
        /// Once the device reset into its AppLoader it stays there until a file verifies (or its
        /// power is cut): a failure from then on leaves it waiting there, its application
        /// overwritten once program data reached it.
        var inAppLoader = false
        /// The device booted the file already (an end whose answer was lost, then the link closed).
        var booted = false
        var backOffered: Set<UInt8>?
        var running: UInt32?

        init(host: SiliconLabsOTAUpdater, prepared: PreparedImage) {
            self.host = host
            image = prepared.bytes
            version = prepared.version
            targetVersion = (try? GeckoBootloaderImage(decoding: prepared.bytes))?.applicationVersion ?? 0
            recorder = host.context.recorder("flash")
            recorder.beginQuietly(.load)
            tries = UpdateTries(limit: host.tries)
        }

        var context: HostContext { host.context }
        var clock: any BleotaClock { host.clock }
        var device: String { host.device }
        var inApplication: Bool { !offered.contains(SiliconLabsOTAChannel.data.rawValue) }

        /// As every recorded host's, except that a try that starts in the application enters its
        /// transfer (and the fleet's gate) only once the device is in its AppLoader.
        mutating func entering(_ step: UpdateStep, for action: UpdateStateMachine.Action) async throws(TransferError) {
            switch action {
            case .transfer: if !inApplication { try await recorder.enterTransfer(closing: link) }
            case .fail, .probe, .finish: break
            default: recorder.enter(step)
            }
        }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            let link = try await context.connect(.initial, step: .connect)
            self.link = link
            offered = try await context.request(DirectoryRequest(), on: link, step: .connect)
            guard offered.contains(SiliconLabsOTAChannel.control.rawValue) else {
                await link.close()
                throw TransferError(
                    .protocolViolation, step: .connect, "\(device) offers no Silicon Labs OTA Control characteristic: its application was built without OTA support")
            }
            versionBefore = inApplication ? try? await host.applicationVersion(on: link) : nil
            pace = Pace(
                packetSize: min(244, link.parameters.maximumPayload - 1, context.tuning.packetSize ?? 244),
                window: context.explicitKnobs.contains(.window) ? max(1, context.tuning.window) : SiliconLabsOTAUpdater.defaultWindow,
                delay: context.tuning.interPacketDelay)
            inAppLoader = !inApplication
            return .application
        }

        mutating func transfer() async throws(TryFailure) {
            attempt += 1
            // An end whose answer was lost: the device booted the file when the link closed.
            if attempt > 1, inApplication, versionBefore != targetVersion, (try? await host.agreedApplicationVersion(on: link!)) == targetVersion {
                context.onEvent(.note("\(device) runs application version \(targetVersion): the last try's end was taken though its answer was lost"))
                booted = true
                return
            }
            do throws(TryFailure) {
                if inApplication {
                    recorder.enter(.enterBootloader)
                    (link, offered) = try await host.enterAppLoader(link!)
                    inAppLoader = true
                    do throws(TransferError) { try await recorder.enterTransfer() } catch { throw TryFailure.final(error) }
                }
                let began = clock.now
                defer { transferTime += clock.now - began }
                try await host.upload(image, on: link!, pace: pace, resend: attempt > 1, statistics: &statistics)
            } catch {
                await link?.close()
                if case .final(var failure) = error, inAppLoader, failure.outcome == nil {
                    failure.outcome = .inBootloader
                    throw .final(failure)
                }
                throw error
            }
        }

        mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) {
            statistics.reconnects += 1
            pace.slowDown()
            context.onEvent(
                .note(
                    "\(retry.reason); beginning again from 0x00 with \(pace.window) writes between reads"
                        + (pace.pipelined ? ", \(pace.readsAhead) reads ahead" : ", each read answered before more go out")
                        + (pace.delay > .zero ? ", \(pace.delay) between writes" : "")))
            recorder.enter(.reconnect)
            do throws(TransferError) {
                let link = try await context.connect(.resume, step: .reconnect)
                self.link = link
                offered = try await context.request(DirectoryRequest(), on: link, step: .reconnect)
            } catch {
                var failure = error
                failure.outcome = inAppLoader ? .inBootloader : .unknown
                throw failure
            }
            // A power cut in the AppLoader boots an intact application: it must be asked again.
            inAppLoader = !inApplication
        }

        mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError {
            var error = TransferError(
                .verificationFailed, step: .transfer, "the GBL file did not arrive whole in \(attempts) tries (\(retry.reason)): move closer to the device")
            error.outcome =
                retry.mayHaveActivated
                ? .unknown : inAppLoader ? .inBootloader : .oldImage(versionBefore.map { "application version \($0)" } ?? DeviceOutcome.unnamedOldImage)
            return error
        }

        mutating func activate() async throws(TransferError) -> Bool {
            guard let link else { return true }
            if booted {
                await link.close()
            } else {
                // 0x04 asks the AppLoader to close the connection, after which it boots the verified file.
                if (try? await host.control(.close, on: link)) != nil { _ = try? await host.writeResult(on: link) }
                await context.awaitDisconnect(link)
            }
            self.link = nil
            return true
        }

        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
            let back = try await context.reconnect(after: nil, expecting: .application)
            backOffered = try? await context.request(DirectoryRequest(), on: back, step: .confirm)
            running = try? await host.agreedApplicationVersion(on: back)
            await back.close()
            return .application
        }

        /// Nil once the file's application runs; otherwise the error says what runs.
        mutating func runningVersion() async throws(TransferError) -> String? {
            if backOffered?.contains(SiliconLabsOTAChannel.data.rawValue) == true {
                var failure = TransferError(.confirmFailed, step: .confirm, "\(device) came back in its AppLoader, not in the new application: run the same command again")
                failure.outcome = .inBootloader
                throw failure
            }
            if let version = running, version != targetVersion {
                var failure = TransferError(.confirmFailed, step: .confirm, "\(device) runs application version \(version), not the file's \(targetVersion)")
                failure.outcome = .oldImage("application version \(version)")
                throw failure
            }
            return nil
        }

        mutating func finish() async -> UpdateReport {
            recorder.versionAfter = version
            var tuning = context.tuning
            tuning.packetSize = pace.packetSize
            tuning.window = pace.window
            tuning.interPacketDelay = pace.delay
            return recorder.finish(
                bytes: image.count,
                transfer: TransferSummary(streamBytes: statistics.bytesOnWire, packetSize: pace.packetSize, elapsed: transferTime),
                statistics: statistics, tuning: tuning)
        }
    }

    /// OTA Control 0x00 in the application, its answer, the reset, and the AppLoader found at the same address.
    func enterAppLoader(_ link: any Link) async throws(TryFailure) -> (any Link, Set<UInt8>) {
        do {
            try await control(.begin, on: link)
            if let code = try await writeResult(on: link), code != 0 {
                throw TryFailure.final(
                    TransferError(
                        .deviceRefused, step: .enterBootloader,
                        "\(device) refused the reset into its AppLoader (ATT error 0x\([code].hexString)): its OTA trigger needs a bonded or encrypted connection"))
            }
        } catch let failure as TryFailure {
            throw failure
        } catch {
            // The device resetting as it answers is expected.
        }
        await context.awaitDisconnect(link)
        let appLoader: any Link
        let offered: Set<UInt8>
        do {
            appLoader = try await context.connect(.resume, step: .reconnect)
            offered = try await context.request(DirectoryRequest(), on: appLoader, step: .reconnect)
        } catch {
            // The device acknowledged the reset (or its answer was lost): where it is is not known.
            var failure = error
            failure.outcome = .unknown
            throw TryFailure.final(failure)
        }
        guard offered.contains(SiliconLabsOTAChannel.data.rawValue) else {
            await appLoader.close()
            throw TryFailure.retry("\(device) came back without OTA Data (still its application)")
        }
        return (appLoader, offered)
    }

    func control(_ value: SiliconLabsOTAControl, on link: any Link) async throws(LinkError) {
        try await link.send(channel: SiliconLabsOTAChannel.control.rawValue, [value.rawValue])
    }

    /// The answer to the last OTA Control write (0 taken, else the error code), or nil after the response time.
    func writeResult(on link: any Link, timeout: Duration? = nil) async throws(LinkError) -> UInt8? {
        let deadline = clock.now + (timeout ?? timeouts.response)
        while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
            if case .writeResult(let channel, let code) = packet, channel == SiliconLabsOTAChannel.control.rawValue { return code }
        }
        return nil
    }

    /// The Application version characteristic, or nil when the device has none or does not answer.
    func applicationVersion(on link: any Link) async throws(LinkError) -> UInt32? {
        guard let value = try await read(.applicationVersion, on: link), value.count == 4 else { return nil }
        return value.enumerated().reduce(0) { $0 | UInt32($1.element) << ($1.offset * 8) }
    }

    /// The Application version as two reads in a row agree on it (a damaged answer must not
    /// decide what the device runs), or nil when the device has none or gives none twice.
    func agreedApplicationVersion(on link: any Link) async throws(LinkError) -> UInt32? {
        var last = try await applicationVersion(on: link)
        for _ in 0..<3 {
            let next = try await applicationVersion(on: link)
            if next == last { return next }
            last = next
        }
        return nil
    }

    func read(_ channel: SiliconLabsOTAChannel, on link: any Link) async throws(LinkError) -> [UInt8]? {
        try await link.send(message: .read(channel: channel.rawValue))
        return try await readAnswer(channel, on: link)
    }

    /// The value a read of `channel` returns, or nil after the response time.
    func readAnswer(_ channel: SiliconLabsOTAChannel, on link: any Link) async throws(LinkError) -> [UInt8]? {
        let deadline = clock.now + timeouts.response
        while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
            if case .packet(let number, let payload) = packet, number == channel.rawValue { return Array(payload) }
        }
        return nil
    }

    /// 0x00, every byte of the file, 0x03 and its verdict.
    func upload(_ image: [UInt8], on link: any Link, pace: Pace, resend: Bool, statistics: inout TransferStatistics) async throws(TryFailure) {
        do {
            try await control(.begin, on: link)
            guard let begun = try await writeResult(on: link) else { throw TryFailure.retry("\(device) did not answer the begin (0x00)") }
            guard begun == 0 else {
                throw TryFailure.final(TransferError(.deviceRefused, step: .transfer, "\(device) refused the begin (0x00): \(SiliconLabsOTAError.name(begun))"))
            }
            let began = clock.now
            var offset = 0
            var sinceRead = 0
            // Reads in flight, each with the bytes written before it: one stays outstanding while
            // the next `window` writes go out, so the stream never waits a whole round trip.
            var reads: [Int] = []
            var answered = 0
            while offset < image.count || !reads.isEmpty {
                if offset < image.count {
                    let end = min(image.count, offset + pace.packetSize)
                    try await link.send(channel: SiliconLabsOTAChannel.data.rawValue, image[offset..<end])
                    statistics.packetsSent += 1
                    if resend { statistics.packetsResent += 1 }
                    statistics.bytesOnWire += end - offset
                    offset = end
                    sinceRead += 1
                    if pace.delay > .zero { try? await clock.sleep(for: pace.delay) }
                    guard sinceRead >= pace.window || offset == image.count else { continue }
                    sinceRead = 0
                    try await link.send(message: .read(channel: SiliconLabsOTAChannel.otaVersion.rawValue))
                    reads.append(offset)
                    let ahead = pace.rampsReads ? min(pace.readsAhead, answered + 1) : pace.readsAhead
                    if offset < image.count, reads.count < ahead { continue }
                }
                // The read's answer follows the writes before it: the device has taken them.
                guard try await readAnswer(.otaVersion, on: link) != nil else {
                    statistics.ackTimeouts += 1
                    throw TryFailure.retry("\(device) did not answer a read of its OTA version after \(reads[0]) bytes")
                }
                let taken = reads.removeFirst()
                statistics.acknowledgements += 1
                answered += 1
                context.onEvent(
                    .progress(
                        TransferProgress(
                            bytesAcknowledged: taken, totalBytes: image.count, packetsSent: statistics.packetsSent,
                            packetsResent: statistics.packetsResent, packetsLost: statistics.packetsLost,
                            elapsed: clock.now - began, window: pace.window, interPacketDelay: pace.delay)))
            }
            try await control(.end, on: link)
            // The AppLoader checks the whole file before it answers.
            guard let verdict = try await writeResult(on: link, timeout: timeouts.verify) else {
                throw TryFailure.retry("\(device) did not answer the end (0x03)", mayHaveActivated: true)
            }
            switch verdict {
            case 0:
                return
            case SiliconLabsOTAError.crcError.rawValue, SiliconLabsOTAError.buffersFull.rawValue, SiliconLabsOTAError.wrongState.rawValue,
                SiliconLabsOTAError.notSupported.rawValue:
                // bleota parsed the file before sending it: a parse that fails on the device means
                // the stream lost or spoiled a write, as a CRC error does; a device that refuses the
                // file itself refuses it again on every try, and the last one says so.
                statistics.packetsLost += 1
                throw TryFailure.retry("\(device) answered the end with \(SiliconLabsOTAError.name(verdict))")
            case let code where SiliconLabsOTAError(rawValue: code) == nil:
                // No code the AppLoader answers with: a damaged answer. Whether the file verified is
                // seen after reconnecting (a verified file boots when the link closes).
                throw TryFailure.retry("\(device) answered the end with an unknown code 0x\([code].hexString)", mayHaveActivated: true)
            default:
                throw TryFailure.final(TransferError(.deviceRefused, step: .verify, "\(device) refused the GBL file: \(SiliconLabsOTAError.name(verdict))"))
            }
        } catch let failure as TryFailure {
            throw failure
        } catch {
            throw TryFailure.retry("the link dropped during the upload (\(error))")
        }
    }
}
