import BleotaCodec
import BleotaEngine
import BleotaLink

/// The host half of ``DescribedProtocol``: connect → (jump to the bootloader
/// and reconnect) → start → packets as `transfer.flow` says → end → (activate)
/// → reconnect to see the device back.
///
/// What it adds to the description: a try that fails because packets went
/// missing (a gap, a bad checksum, an incomplete image, a CRC that does not
/// match) is started again from the start command, slower — reads every half
/// as many packets with flow `none`, a smaller window with `ack` — up to
/// `retries` times; with `transfer.resume`, a dropped link continues from the
/// device's next index instead. A refusal the device names (too big, a bad
/// command) ends the update with the device's own status name.
package struct DescribedUpdater: ContextHost {
    package let description: ProtocolDescription
    package let context: HostContext

    package init(description: ProtocolDescription, context: HostContext) {
        self.description = description
        self.context = context
    }

    var tries: Int { context.tries(default: 4) }

    /// How fast a try sends: reads every `readEvery` packets (flow none), `window` packets in flight (flow ack), a pause per packet.
    struct Pace {
        var readEvery: Int?
        var window: Int
        var delay: Duration
        /// Reads whose answers may be outstanding while packets go on (flow none): a group's
        /// packets follow the read behind the group before, and the oldest read's answer is awaited
        /// only when this many are out. A read is an ATT Read Request, which Write Commands pass,
        /// and its answer comes once the device took every packet before it, so it paces as well
        /// two groups later: a read's answer takes two connection events, one group of short
        /// packets one. One after a try that failed: a device that lost packets gets each read's
        /// answer before more.
        var readsOutstanding = 3
    }

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        try await run(prepared.bytes, version: prepared.version, activate: true)
    }

    /// Sent and verified, never activated; refused (as ``DescribedProtocol/capabilities`` says)
    /// where the description has no activate message, since such a device installs what its
    /// transfer ends with.
    package func testTransfer(image: PreparedImage) async throws(TransferError) -> UpdateReport {
        guard description.update.activate != nil else {
            throw TransferError(
                .unsupported, step: .connect,
                "\(description.displayName) devices install an image as its transfer ends (the description has no activate message), so a test transfer would not leave them as they were: tune cannot measure them"
            )
        }
        return try await run(image.bytes, version: image.version, activate: false)
    }

    package func testTransfer(_ bytes: [UInt8]) async throws(TransferError) -> UpdateReport {
        throw TransferError(
            .unsupported, step: .connect,
            "\(description.displayName) devices take only real images: give tune an image (--image FILE), which is sent and verified but never activated")
    }

    func send(_ name: String, _ variables: [String: UInt64], on link: any Link) async throws(LinkError) {
        let template = description.message(name)
        try await link.send(channel: template.channel, template.encode(variables))
    }

    /// Waits for `name` and returns what it carried; other packets (late acknowledgements) are skipped.
    func await(_ name: String, on link: any Link, timeout: Duration) async throws(LinkError) -> [String: UInt64]? {
        let template = description.message(name)
        let deadline = clock.now + timeout
        while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
            guard case .packet(let channel, let payload) = packet, channel == template.channel,
                case .matched(let variables, _) = template.decode(payload)
            else { continue }
            return variables
        }
        return nil
    }

    func run(_ image: [UInt8], version: String, activate: Bool) async throws(TransferError) -> UpdateReport {
        var steps = try FlashSteps(host: self, image: image, version: version, activates: activate)
        var machine = UpdateStateMachine(expectedVersion: version)
        return try await machine.run(&steps)
    }

    /// An update's steps as a described protocol performs them, for the engine's lifecycle:
    /// the jump to the bootloader when the application lacks the data characteristic, the
    /// start command and the packets as one try's transfer, the end command as its
    /// verification.
    ///
    /// A described bootloader checks an image by starting it: a device that comes back in its
    /// bootloader after the activation did not get the image whole. So when the update
    /// activates, the activation and the device's return are part of the verification's try
    /// (a device back in its bootloader is another try, slower), and the lifecycle's own
    /// activate and confirm steps find them done.
    struct FlashSteps: RecordedLifecycleSteps {
        let host: DescribedUpdater
        /// The image as it is sent (aligned).
        let bytes: [UInt8]
        let imageSize: Int
        let version: String
        /// The number the description's commands carry as the image's version.
        let versionNumber: UInt64
        /// False for a test transfer: sent and verified, never activated.
        let activates: Bool
        var recorder: OperationRecorder
        var tries: UpdateTries
        var link: (any Link)?
        var pace: Pace
        var statistics = TransferStatistics()
        var transferTime = Duration.zero
        var tryStarted = Duration.zero
        var payloadSize = 0
        /// What the end command carried, for the try's verification.
        var endVariables: [String: UInt64] = [:]
        /// Whether an end command reached the device without its answer coming back: it may have activated the image.
        var activationPossible = false

        init(host: DescribedUpdater, image: [UInt8], version: String, activates: Bool) throws(TransferError) {
            self.host = host
            self.version = version
            self.activates = activates
            imageSize = image.count
            recorder = host.context.recorder(activates ? "flash" : "test-transfer")
            recorder.beginQuietly(.load)
            bytes = try host.prepare(image)
            versionNumber = host.context.options[DescribedProtocol.HostOptions.version]
            tries = UpdateTries(limit: host.tries)
            let context = host.context
            let transfer = host.description.transfer
            pace = Pace(readEvery: nil, window: 1, delay: context.explicitKnobs.contains(.delay) ? context.tuning.interPacketDelay : .zero)
            if case .none(let every, _) = transfer.flow { pace.readEvery = context.explicitKnobs.contains(.window) ? max(1, context.tuning.window) : every }
            if case .acknowledged(_, let every) = transfer.flow {
                pace.window = context.explicitKnobs.contains(.window) ? max(every, context.tuning.window) : 2 * every
            }
        }

        var context: HostContext { host.context }
        var clock: any BleotaClock { host.clock }
        var description: ProtocolDescription { host.description }
        /// The data channel: offered by the bootloader (or an application that takes the image itself).
        var dataChannel: UInt8 { description.message(description.transfer.packet).channel }

        /// The activation and the device's return were entered inside the verification's try.
        mutating func entering(_ step: UpdateStep, for action: UpdateStateMachine.Action) async throws(TransferError) {
            switch action {
            case .transfer: try await recorder.enterTransfer(closing: link)
            case .activate, .reconnect(expecting: .application), .confirm, .fail, .probe, .finish: break
            default: recorder.enter(step)
            }
        }

        /// In the bootloader when the data characteristic is offered (or no jump is described).
        mutating func connect() async throws(TransferError) -> DeviceMode {
            let link = try await context.connect(.initial, step: .connect)
            self.link = link
            return try await mode(of: link, step: .connect)
        }

        func mode(of link: any Link, step: UpdateStep) async throws(TransferError) -> DeviceMode {
            guard description.update.enterBootloader != nil else { return .bootloader }
            return try await context.request(DirectoryRequest(), on: link, step: step).contains(dataChannel) ? .bootloader : .application
        }

        /// The jump command; a refusal the device names ends the update, a lost answer is the reset's.
        mutating func enterBootloader() async throws(TransferError) -> Bool {
            guard let jump = description.update.enterBootloader, let link else { return true }
            do {
                try await host.send(jump.send, [:], on: link)
                guard let answer = jump.answer else { return true }
                guard let variables = try await host.await(answer, on: link, timeout: jump.timeout) else { return false }
                try host.check(variables, step: .enterBootloader, what: "the jump to the bootloader")
                return true
            } catch let error as TransferError {
                throw error
            } catch {
                // The application restarting as it answers is expected.
                return false
            }
        }

        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
            // After an activation the device came back inside the verification's try (see the type's notes).
            guard mode == .bootloader else { return .application }
            let previous = link
            link = nil
            let back = try await context.reconnect(after: previous, expecting: .bootloader)
            link = back
            let found = try await self.mode(of: back, step: .reconnect)
            if found == .application {
                await back.close()
                link = nil
            }
            return found
        }

        /// The start command and the packets.
        mutating func transfer() async throws(TryFailure) {
            tryStarted = clock.now
            do throws(TryFailure) {
                (payloadSize, endVariables) = try await host.upload(bytes, version: versionNumber, on: link!, pace: pace, statistics: &statistics)
            } catch {
                transferTime += clock.now - tryStarted
                await link?.close()
                throw error
            }
        }

        /// The end command, whose answer comes once the device has taken every packet (the
        /// transfer lasts until then); when the update activates, the activation and the
        /// device back in its application.
        mutating func verify() async throws(TryFailure) -> (ok: Bool, detail: String) {
            do throws(TryFailure) {
                do throws(TryFailure) {
                    try await host.end(on: link!, variables: endVariables)
                    transferTime += clock.now - tryStarted
                } catch {
                    transferTime += clock.now - tryStarted
                    // The end reached the device and no answer came back: it may have activated the image.
                    if case .again(var retry) = error, retry.linkDropped {
                        retry.mayHaveActivated = true
                        activationPossible = true
                        throw .again(retry)
                    }
                    throw error
                }
                if activates { link = try await host.activateAndConfirm(link!, recorder: &recorder) }
            } catch {
                await link?.close()
                throw error
            }
            return (true, "")
        }

        /// A dropped link is found again; an image that did not arrive whole is sent again slower,
        /// on the link the failure came with or a new one (a failure the device reported may reboot it).
        mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) {
            // An end command left unanswered on a link still up was most likely dropped by a device
            // whose queue the packets before it filled (nothing else tells a device that takes
            // packets without any flow from one that lost some): the next try goes slower too.
            let slower = !retry.linkDropped || retry.mayHaveActivated
            if retry.linkDropped { statistics.reconnects += 1 }
            if slower {
                if case .none(.some, _) = description.transfer.flow, !context.explicitKnobs.contains(.window),
                    !context.explicitKnobs.contains(.delay)
                {
                    // Reads pace by round trips, and on a device slower than its link each read costs a
                    // packet's work and a place in its queue: a read every 2 packets, waited for, was
                    // what fitted `slow-flash` (1.04 KiB/s, 25 % of Telink's ceiling), and no schedule of
                    // reads passes 75 %. A pause per packet costs the device nothing: the next try sends
                    // without reads, 2 ms between packets, and each try after that twice as long
                    // (`slow-flash`: 2 ms is 7 packets an event, still too many; 4 ms is 3 or 4, what its
                    // queue of 4 takes while it works).
                    pace.readEvery = nil
                    pace.delay = max(pace.delay * 2, .milliseconds(2))
                } else {
                    pace.readEvery = pace.readEvery.map { max(1, $0 / 2) }
                    pace.readsOutstanding = 1
                    pace.window = max(1, pace.window / 2)
                    if case .none(nil, _) = description.transfer.flow { pace.delay = max(pace.delay * 2, .milliseconds(5)) }
                }
            }
            context.onEvent(
                .note(
                    retry.linkDropped
                        ? "\(retry.reason): reconnecting\(slower ? ", then slower" : "")"
                        : "\(retry.reason); starting again from the start command, slower"))
            if !retry.linkDropped, let connection = retry.connection {
                link = connection
            } else {
                recorder.enter(.reconnect)
                link = try await context.connect(.resume, step: .reconnect)
            }
            // A device that went back to its application (a bootloader that gave up waiting) is asked to jump again.
            guard try await mode(of: link!, step: .connect) == .application else { return }
            recorder.enter(.enterBootloader)
            _ = try await enterBootloader()
            recorder.enter(.reconnect)
            guard try await reconnect(expecting: .bootloader) == .bootloader else {
                throw TransferError(.deviceRefused, step: .enterBootloader, "\(context.connector.description) stayed in its application after the jump to its bootloader")
            }
        }

        mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError {
            var error: TransferError
            if retry.linkDropped {
                error = TransferError(.linkLost, step: .transfer, "\(retry.reason), \(attempts) times: move closer to the device")
            } else {
                await retry.connection?.close()
                error = TransferError(
                    .verificationFailed, step: .transfer,
                    "the image did not arrive whole in \(attempts) tries (\(retry.reason)): try --delay 10ms, a smaller --window, or move closer to the device")
            }
            error.outcome =
                if !retry.linkDropped, retry.connection != nil {
                    .inBootloader
                } else if activationPossible || description.update.bootloaderErasesApplication {
                    .unknown
                } else {
                    .oldImage(DeviceOutcome.unnamedOldImage)
                }
            return error
        }

        mutating func activate() async throws(TransferError) -> Bool { true }

        /// A described device does not say what it runs: its coming back (inside the verification) is the confirmation.
        mutating func runningVersion() async throws(TransferError) -> String? { nil }

        mutating func finish() async -> UpdateReport {
            var tuning = context.tuning
            tuning.packetSize = payloadSize
            tuning.window = pace.readEvery ?? pace.window
            tuning.interPacketDelay = pace.delay
            let summary = TransferSummary(streamBytes: statistics.bytesOnWire, packetSize: payloadSize, elapsed: transferTime)
            await link?.close()
            if activates { recorder.versionAfter = version }
            return recorder.finish(bytes: imageSize, transfer: summary, statistics: statistics, tuning: tuning)
        }
    }

    /// The activate command (when the end does not activate by itself), then the
    /// device seen back in its application. Returns the new connection.
    func activateAndConfirm(_ link: any Link, recorder: inout OperationRecorder) async throws(TryFailure) -> any Link {
        if let step = description.update.activate {
            recorder.enter(.activate)
            do {
                try await send(step.send, [:], on: link)
                if let answer = step.answer {
                    guard let variables = try await self.await(answer, on: link, timeout: step.timeout) else {
                        throw TryFailure.final(
                            TransferError(.timeout, step: .activate, "\(context.connector.description) did not answer the activate command within \(step.timeout)"))
                    }
                    do { try check(variables, step: .activate, what: "the activate command") } catch { throw TryFailure.final(error) }
                }
            } catch let failure as TryFailure {
                throw failure
            } catch {
                // The device restarting as it answers is not a failure.
            }
        }
        recorder.enter(.confirm)
        await context.awaitDisconnect(link)
        let back: any Link
        do { back = try await context.connect(.application, step: .confirm) } catch {
            var failure = error
            failure.outcome = .unknown
            throw TryFailure.final(failure)
        }
        guard description.update.enterBootloader != nil else { return back }
        let offered: Set<UInt8>
        do { offered = try await context.request(DirectoryRequest(), on: back, step: .confirm) } catch { throw TryFailure.final(error) }
        let data = description.message(description.transfer.packet).channel
        if offered.contains(data), !description.characteristics[Int(data)].offeredIn.contains(.application) {
            // The bootloader did not start the image: it did not arrive whole, or it is not one the device boots.
            throw TryFailure.retry("\(context.connector.description) came back in its bootloader, not running the new image", connection: back)
        }
        return back
    }

    /// The image as it is sent: padded to the description's alignment, refused when too big.
    func prepare(_ image: [UInt8]) throws(TransferError) -> [UInt8] {
        var bytes = image
        let align = description.image.align
        if align > 1, bytes.count % align != 0 { bytes += repeatElement(description.image.fill, count: align - bytes.count % align) }
        if let maximum = description.image.maximumSize, bytes.count > maximum {
            throw TransferError(.badInput, step: .load, "the image is \(bytes.count) bytes, more than the \(maximum) a \(description.displayName) device takes (image.max-size)")
        }
        guard !bytes.isEmpty else { throw TransferError(.badInput, step: .load, "the image is empty") }
        return bytes
    }

    /// Refuses an answer whose status is not success, naming the status as the description does.
    func check(_ variables: [String: UInt64], step: UpdateStep, what: String) throws(TransferError) {
        guard let status = variables["status"], status != description.statuses.success else { return }
        throw TransferError(.deviceRefused, step: step, "\(context.connector.description) refused \(what): \(description.statuses.name(status))")
    }

    /// A failure answer's meaning: one a slower try may cure, or a refusal.
    func failure(_ status: UInt64, what: String) -> TryFailure {
        let name = description.statuses.name(status)
        switch description.statuses.codes[status]?.meaning {
        case .gap?, .badChecksum?, .incomplete?, .verifyFailed?, nil:
            return .retry("\(context.connector.description) answered \(what) with \(name)")
        case .tooBig?, .notStarted?, .badCommand?:
            return .final(TransferError(.deviceRefused, step: .transfer, "\(context.connector.description) refused \(what): \(name)"))
        }
    }

    func linkFailure(_ error: LinkError) -> TryFailure {
        .retry("the link dropped during the transfer (\(error))", linkDropped: true)
    }

    /// What an error thrown inside a try means for it: a failure as it is, a link error as a drop.
    func tryFailure(_ error: any Error) -> TryFailure {
        if let failure = error as? TryFailure { return failure }
        return linkFailure(error as? LinkError ?? .cancelled)
    }

    /// Start, then the packets; returns the payload size used. `version` is the number
    /// the description's commands carry as the image's version (`--protocol-option version`).
    func upload(_ bytes: [UInt8], version: UInt64, on link: any Link, pace: Pace, statistics: inout TransferStatistics) async throws(TryFailure) -> (Int, [String: UInt64]) {
        let packet = description.message(description.transfer.packet)
        let size = description.transfer.payloadSize ?? link.parameters.dataPerPacket(after: 1 + packet.overhead, asked: context.askedPacketSize)
        guard size > 0 else {
            throw .final(
                TransferError(
                    .unsupported, step: .transfer,
                    "the link's packets (\(link.parameters.maximumPayload - 1) bytes) cannot hold a \(packet.name) packet's \(packet.overhead) bytes of header"))
        }
        let count = (bytes.count + size - 1) / size
        let variables: [String: UInt64] = [
            "image-size": UInt64(bytes.count), "image-crc32": UInt64(CRC32.checksum(bytes)),
            "image-crc16": {
                var crc = CRC16(.ccittFalse)
                crc.update(bytes)
                return UInt64(crc.value)
            }(),
            "packet-count": UInt64(count), "last-index": UInt64(count - 1), "payload-size": UInt64(size),
            "version": version,
        ]
        var first = 0
        // A device that keeps its progress answers a repeated start with the index it expects next.
        if let start = description.update.start {
            do {
                try await send(start.send, variables, on: link)
                if let answer = start.answer {
                    guard let reply = try await self.await(answer, on: link, timeout: start.timeout) else {
                        throw TryFailure.retry("\(context.connector.description) did not answer the start command within \(start.timeout)", linkDropped: true)
                    }
                    if let status = reply["status"], status != description.statuses.success {
                        switch description.statuses.codes[status]?.meaning {
                        case .tooBig?:
                            throw TryFailure.final(
                                TransferError(
                                    .deviceRefused, step: .transfer,
                                    "\(context.connector.description) refused the start: \(description.statuses.name(status)) (the image is \(bytes.count) bytes)"))
                        default:
                            throw TryFailure.final(
                                TransferError(.deviceRefused, step: .transfer, "\(context.connector.description) refused the start: \(description.statuses.name(status))"))
                        }
                    }
                    if description.transfer.resume, let next = reply["next-index"] {
                        first = min(count, Self.unwrap(next, mask: Self.mask(of: description.message(answer), variable: "next-index"), near: 0))
                        if first > 0 { context.onEvent(.note("the device has \(first) of \(count) packets: going on from there")) }
                    }
                }
            } catch {
                throw tryFailure(error)
            }
        }
        func packetMessage(_ index: Int) -> ChannelMessage {
            let from = index * size
            var payload = bytes[from..<min(bytes.count, from + size)]
            if let pad = description.transfer.padLastPacket, payload.count < size {
                payload = ArraySlice(Array(payload) + repeatElement(pad, count: size - payload.count))
            }
            var values = variables
            values["index"] = UInt64(index)
            values["offset"] = UInt64(from)
            return .packet(packet.channel, packet.encode(values, payload: payload))
        }
        let onEvent = context.onEvent
        let total = bytes.count
        let readEvery = pace.readEvery
        let window = pace.window
        let delay = pace.delay
        let report: (Int, TransferStatistics) -> Void = { done, statistics in
            onEvent(
                .progress(
                    TransferProgress(
                        bytesAcknowledged: min(total, done * size), totalBytes: total,
                        packetsSent: statistics.packetsSent, packetsResent: statistics.packetsResent,
                        packetsLost: statistics.packetsLost, elapsed: .zero, window: readEvery ?? window,
                        interPacketDelay: delay)))
        }
        var reported: UInt64?
        do throws(LinkError) {
            switch description.transfer.flow {
            case .none(_, let read):
                /// Reads sent whose answers are still to come, oldest first: the packets each follows.
                var readsPending: [Int] = []
                /// Packets between reads: as described, doubled (to four times that) after four reads
                /// in a row whose answers were in before the host needed them — a device that keeps
                /// up needs the pacing less, and each read takes a packet's place on the link. Reads
                /// that must be waited for keep it where it is.
                var every = pace.readEvery
                var readsInTime = 0
                var sinceRead = 0
                sending: for index in 0..<count {
                    let data = packetMessage(index)
                    try await link.send(message: data)
                    statistics.packetsSent += 1
                    statistics.bytesOnWire += data.framedSize - 1
                    if pace.delay > .zero { try? await clock.sleep(for: pace.delay) }
                    sinceRead += 1
                    if let interval = every, let read, sinceRead >= interval || index == count - 1 {
                        sinceRead = 0
                        try await link.send(message: .read(channel: UInt8(read)))
                        readsPending.append(index + 1)
                        // The last read's answer is awaited with the others': the end goes after all of them.
                        let keep = index == count - 1 ? 0 : max(1, pace.readsOutstanding) - 1
                        while readsPending.count > keep {
                            let asked = clock.now
                            reported = try await awaitRead(UInt8(read), on: link)
                            let answered = readsPending.removeFirst()
                            if reported != nil { break sending }
                            report(answered, statistics)
                            readsInTime = clock.now - asked < AnswerTiming.alreadyIn && pace.readsOutstanding > 1 ? readsInTime + 1 : 0
                            if readsInTime >= 4, let described = pace.readEvery, interval < 4 * described {
                                every = interval * 2
                                readsInTime = 0
                            }
                        }
                    } else if index % 64 == 63 {
                        report(index + 1, statistics)
                    }
                }
            case .acknowledged(let ack, _):
                try await sendAcknowledged(
                    count: count, start: first, ack: ack, pace: pace, packetMessage: packetMessage, on: link,
                    statistics: &statistics, report: report)
            case .requested(let request):
                try await serveRequests(
                    count: count, request: request, pace: pace, packetMessage: packetMessage, on: link,
                    statistics: &statistics, report: report)
            }
        } catch {
            // A device that reports a failure and reboots (Telink's at a gap) may drop the link while
            // packets are still going: the report, if it came, is what the try ended with.
            guard let status = await statusLeftBehind(on: link) else { throw linkFailure(error) }
            reported = status
        }
        if let reported { throw failure(reported, what: "the transfer") }
        report(count, statistics)
        return (size, variables)
    }

    /// A failure status the end's answer carried among the messages that arrived before the link
    /// dropped; nil when none did.
    func statusLeftBehind(on link: any Link) async -> UInt64? {
        guard let answer = description.update.end.answer.map({ description.message($0) }) else { return nil }
        while let packet = try? await link.receiveMessage(within: AnswerTiming.alreadyIn, clock: clock) {
            if case .packet(let from, let payload) = packet, let status = failureStatus(from, payload, answer: answer) { return status }
        }
        return nil
    }

    /// A read's answer (its value does not matter: the round trip paces the sender). The end's
    /// answer met meanwhile with a failure status (a device that reports a failure at once) is returned.
    func awaitRead(_ channel: UInt8, on link: any Link) async throws(LinkError) -> UInt64? {
        let answer = description.update.end.answer.map { description.message($0) }
        let deadline = clock.now + timeouts.response
        while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
            guard case .packet(let from, let payload) = packet else { continue }
            if let status = failureStatus(from, payload, answer: answer) { return status }
            if from == channel { return nil }
        }
        return nil
    }

    /// The failure status a packet carries when it is the end's answer (`answer`) with a status
    /// other than success; nil for anything else.
    func failureStatus(_ channel: UInt8, _ payload: ArraySlice<UInt8>, answer: MessageTemplate?) -> UInt64? {
        guard let answer, channel == answer.channel, case .matched(let variables, _) = answer.decode(payload),
            let status = variables["status"], status != description.statuses.success
        else { return nil }
        return status
    }

    /// Go-back-N under the device's acknowledgements (``/BleotaEngine/GoBackSender``): up to
    /// `window` packets beyond the last one acknowledged; an acknowledgement that reports a gap
    /// (or repeats itself) sends again from the index it names.
    func sendAcknowledged(
        count: Int, start: Int, ack: String, pace: Pace, packetMessage: (Int) -> ChannelMessage, on link: any Link,
        statistics: inout TransferStatistics, report: (Int, TransferStatistics) -> Void
    ) async throws(LinkError) {
        let template = description.message(ack)
        let mask = Self.mask(of: template, variable: "next-index")
        var sender = GoBackSender(unitCount: count, start: start, window: pace.window)
        var lastAcknowledged = -1
        while !sender.isComplete {
            while let index = sender.unitToSend {
                let data = packetMessage(index)
                try await link.send(message: data)
                if sender.sent() { statistics.packetsResent += 1 }
                statistics.packetsSent += 1
                statistics.bytesOnWire += data.framedSize - 1
                if pace.delay > .zero { try? await clock.sleep(for: pace.delay) }
            }
            guard let packet = try await link.receiveMessage(within: context.explicitKnobs.contains(.ackTimeout) ? context.tuning.ackTimeout : timeouts.response, clock: clock)
            else {
                statistics.ackTimeouts += 1
                let silent = sender.waitedInVain()
                guard silent < max(2, timeouts.attempts) else { throw LinkError.disconnected("no acknowledgement in \(silent) rounds") }
                continue
            }
            guard case .packet(let channel, let payload) = packet, channel == template.channel,
                case .matched(let variables, _) = template.decode(payload), let raw = variables["next-index"]
            else { continue }
            sender.answered()
            statistics.acknowledgements += 1
            // The wrapped index names the packet nearest the window's base.
            let acknowledged = Self.unwrap(raw, mask: mask, near: sender.base)
            guard acknowledged >= sender.base - Int(min(mask, 1 << 20)) / 2, acknowledged <= count else { continue }
            let gap = variables["status"].map { $0 != description.statuses.success } ?? false
            if gap || acknowledged == lastAcknowledged, acknowledged < sender.next {
                statistics.negativeAcknowledgements += 1
                statistics.packetsLost += sender.next - acknowledged
                // One behind the device's point (a late answer) sends from the point.
                sender.missing(from: max(acknowledged, sender.base))
            }
            lastAcknowledged = acknowledged
            sender.acknowledged(before: acknowledged)
            report(sender.base, statistics)
        }
    }

    /// Answers the device's block requests until it asks for nothing more.
    func serveRequests(
        count: Int, request: String, pace: Pace, packetMessage: (Int) -> ChannelMessage, on link: any Link,
        statistics: inout TransferStatistics, report: (Int, TransferStatistics) -> Void
    ) async throws(LinkError) {
        let template = description.message(request)
        let mask = Self.mask(of: template, variable: "index")
        var highest = 0
        var quiet = 0
        while true {
            let wait = highest >= count ? Duration.milliseconds(600) : timeouts.response
            guard let packet = try await link.receiveMessage(within: wait, clock: clock) else {
                if highest >= count { return }
                quiet += 1
                guard quiet < max(2, timeouts.attempts) else { throw LinkError.disconnected("no block request in \(quiet) waits") }
                continue
            }
            guard case .packet(let channel, let payload) = packet, channel == template.channel,
                case .matched(let variables, _) = template.decode(payload), let raw = variables["index"]
            else { continue }
            quiet = 0
            let first = Self.unwrap(raw, mask: mask, near: highest)
            guard first >= 0, first < count else {
                if first >= count { return }
                continue
            }
            let wanted = Int(variables["count"] ?? 1)
            for index in first..<min(count, first + max(1, wanted)) {
                let data = packetMessage(index)
                try await link.send(message: data)
                statistics.packetsSent += 1
                if index < highest { statistics.packetsResent += 1 }
                statistics.bytesOnWire += data.framedSize - 1
                highest = max(highest, index + 1)
                if pace.delay > .zero { try? await clock.sleep(for: pace.delay) }
            }
            report(first, statistics)
        }
    }

    /// The end command and its answer.
    func end(on link: any Link, variables: [String: UInt64]) async throws(TryFailure) {
        let step = description.update.end
        do {
            try await send(step.send, variables, on: link)
            guard let answer = step.answer else { return }
            guard let reply = try await self.await(answer, on: link, timeout: max(step.timeout, timeouts.verify)) else {
                throw TryFailure.retry("\(context.connector.description) did not answer the end command within \(max(step.timeout, timeouts.verify))", linkDropped: true)
            }
            if let status = reply["status"], status != description.statuses.success {
                throw failure(status, what: "the end command")
            }
        } catch {
            throw tryFailure(error)
        }
    }

    static func mask(of template: MessageTemplate, variable: String) -> UInt64 {
        for field in template.fields {
            if case .integer(let integer) = field, integer.value == .variable(variable) { return integer.mask }
        }
        return .max
    }

    /// The absolute index whose low bits are `raw`, nearest to `reference`.
    static func unwrap(_ raw: UInt64, mask: UInt64, near reference: Int) -> Int {
        guard mask < UInt64(Int.max) else { return Int(clamping: raw) }
        let span = Int(mask) + 1
        let base = reference - reference % span
        var candidate = base + Int(raw)
        if candidate - reference > span / 2 { candidate -= span }
        if reference - candidate > span / 2 { candidate += span }
        return candidate
    }
}
