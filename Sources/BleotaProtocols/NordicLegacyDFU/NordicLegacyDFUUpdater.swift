import BleotaCodec
import BleotaEngine
import BleotaLink
import Logging

/// The host half of ``NordicLegacyDFUProtocol`` over BLE and the simulator:
/// per part, connect → (jump from the application, revision 0x0001) → Start
/// with the sizes (answered after the erase) → init packet → receipts every
/// `window` packets → the image → Validate → Activate.
///
/// Legacy DFU cannot resume: a part the bootloader did not take whole — a
/// receipt that counts fewer bytes than were sent, a CRC error at Validate, a
/// lost answer, a dropped link — is started again from its Start (the
/// bootloader is reset first; a dual-bank bootloader keeps the old
/// application meanwhile), up to `retries` times.
package struct NordicLegacyDFUUpdater: ContextHost {
    package var context: HostContext

    package init(context: HostContext) { self.context = context }

    /// The shortest wait for a receipt before asking what the bootloader holds, at one write a receipt.
    static let shortestReceiptWait = Duration.milliseconds(250)

    /// Packets between receipts on a bootloader that erased slowly (see `send`).
    static let slowBootloaderReceiptInterval: UInt16 = 3

    /// Packets between receipts: as given, or 10 as nrfutil and Nordic's libraries use for legacy bootloaders.
    var initialReceiptInterval: UInt16 { context.explicitKnobs.contains(.window) ? UInt16(clamping: max(1, context.tuning.window)) : 10 }
    var tries: Int { context.tries(default: 3) }

    /// What went wrong in one try of a part: retried (the link, the data), or final (the device's refusal).
    enum PartFailure: Error {
        /// Worth another try; `refusal` is what to report if no try is left (a refusal that
        /// may have been caused by a lost write).
        case retry(String, refusal: TransferError? = nil, lostPackets: Bool = false)
        case final(TransferError)
    }

    func connect(_ purpose: ConnectPurpose, step: UpdateStep) async throws(TransferError) -> (link: any Link, revision: UInt16) {
        let link = try await context.connect(purpose, step: step, timeout: purpose == .initial ? timeouts.connect : timeouts.reboot)
        return try await identify(link, step: step)
    }

    /// Reads the revision characteristic: application (0x0001) or bootloader (0x0008).
    func identify(_ link: any Link, step: UpdateStep) async throws(TransferError) -> (link: any Link, revision: UInt16) {
        do { return (link, try await context.request(NordicLegacyRevisionRequest(), on: link, step: step)) } catch {
            await link.close()
            throw error
        }
    }

    /// The next notification on the control point, or nil after `timeout`.
    func notification(_ link: any Link, timeout: Duration) async throws(LinkError) -> NordicLegacyNotification? {
        let deadline = clock.now + timeout
        while deadline > clock.now {
            guard let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) else { return nil }
            guard case .packet(let channel, let payload) = packet, channel == NordicLegacyChannel.controlPoint.rawValue,
                let decoded = try? NordicLegacyNotification(decoding: Array(payload))
            else { continue }
            return decoded
        }
        return nil
    }

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        try await run(prepared, activate: true)
    }

    package func testTransfer(_ bytes: [UInt8]) async throws(TransferError) -> UpdateReport {
        throw realImageRequired("legacy bootloaders")
    }

    /// The package's last part sent and validated as flash sends it, then Reset
    /// instead of Activate: the device keeps running what it ran.
    package func testTransfer(image: PreparedImage) async throws(TransferError) -> UpdateReport {
        try await run(try image.lastPartAlone(), activate: false)
    }

    func run(_ prepared: PreparedImage, activate: Bool) async throws(TransferError) -> UpdateReport {
        let recorder = context.recorder(activate ? "flash" : "test-transfer")
        let first: any Link
        do { first = try await connector.connect(for: .initial, timeout: timeouts.connect) } catch {
            throw TransferError(.linkLost, step: .connect, "cannot reach \(connector.description): \(error)")
        }
        // Over the serial transport (the link says which it is) nothing comes back but acknowledgements of HCI frames.
        if first.parameters.transport == .nordicHCI {
            let serial = first
            guard activate else {
                await serial.close()
                throw TransferError(.unsupported, step: .connect, "legacy serial DFU reports nothing back, so there is nothing to measure: tune over BLE")
            }
            var steps = SerialFlashSteps(host: self, prepared: prepared, recorder: recorder, link: serial)
            var machine = UpdateStateMachine(expectedVersion: prepared.version)
            return try await machine.run(&steps)
        }
        var steps = FlashSteps(host: self, prepared: prepared, activates: activate, recorder: recorder, first: first)
        var machine = UpdateStateMachine(expectedVersion: prepared.version)
        return try await machine.run(&steps)
    }

    /// An update's steps as legacy DFU performs them over BLE, for the engine's lifecycle: the
    /// application's jump (revision 0x0001) and the bootloader found again, every part of the
    /// package as the transfer (each in a connection of its own, the bootloader resetting into
    /// it), and the application seen back as the confirmation.
    ///
    /// Validate and Activate end each part, inside the transfer (``NordicLifecycleSteps``). A
    /// part the bootloader did not take whole is
    /// sent again from its Start, up to `retries` tries a part (``TryFailure/Retry/progressed``
    /// after the parts before it arrived).
    struct FlashSteps: NordicLifecycleSteps {
        let host: NordicLegacyDFUUpdater
        let prepared: PreparedImage
        /// False for a test transfer: each part is reset instead of activated.
        let activates: Bool
        var recorder: OperationRecorder
        /// The bootloader's reset after a failed part boots what its banks hold: the host cannot name it.
        var tries: UpdateTries
        var link: (any Link)?
        /// The part the next try starts with: the ones before it arrived whole.
        var nextPart = 0
        /// Image bytes of the parts that arrived.
        var done = 0
        /// Packets between receipts: halved when packets were lost.
        var interval: UInt16
        var packetSize = 0
        var statistics = TransferStatistics()
        var transferTime = Duration.zero
        /// What to report if no try of a part is left: a refusal that may have come from a lost write.
        var refusal: TransferError?
        /// Whether a group of writes may go before the last one is counted (the default, `--window`
        /// not given): off for good once a device lost writes, erased slowly, or a try failed.
        var receiptsAhead: Bool

        init(host: NordicLegacyDFUUpdater, prepared: PreparedImage, activates: Bool, recorder: OperationRecorder, first: any Link) {
            self.host = host
            self.prepared = prepared
            self.activates = activates
            self.recorder = recorder
            self.recorder.beginQuietly(.load)
            link = first
            interval = host.initialReceiptInterval
            receiptsAhead = !host.context.explicitKnobs.contains(.window)
            tries = UpdateTries(limit: host.tries, exhaustionKeepsTheOldImage: false)
        }

        var device: String { host.connector.description }

        static func mode(_ revision: UInt16) -> DeviceMode {
            revision == NordicLegacyDFUDevice.applicationRevision ? .application : .bootloader
        }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            guard let first = link else { return .bootloader }
            let (connection, revision) = try await host.identify(first, step: .connect)
            link = connection
            return Self.mode(revision)
        }

        /// The application jumps at once, without an answer (Adafruit's BLEDfu, Nordic's libraries write 01 04).
        mutating func enterBootloader() async throws(TransferError) -> Bool {
            try? await link?.send(channel: NordicLegacyChannel.controlPoint.rawValue, [0x01, 0x04])
            return true
        }

        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
            let previous = link
            link = nil
            // A test transfer reset each part back into what ran before.
            if mode == .application, !activates {
                if let previous { await host.context.awaitDisconnect(previous) }
                return .application
            }
            let back = try await host.context.reconnect(after: previous, expecting: mode)
            let (_, revision) = try await host.identify(back, step: mode == .bootloader ? .reconnect : .confirm)
            // Kept for the transfer when the bootloader is there; the application only answers who it is.
            if mode == .bootloader, Self.mode(revision) == .bootloader { link = back } else { await back.close() }
            return Self.mode(revision)
        }

        /// A connection to the bootloader for a part after the first or another try: the
        /// application (that a failed part's reset may boot) jumps again.
        mutating func bootloaderAgain() async throws(TransferError) -> any Link {
            var (connection, revision) = try await host.connect(.bootloader, step: .reconnect)
            if Self.mode(revision) == .application {
                recorder.enter(.enterBootloader)
                link = connection
                _ = try await enterBootloader()
                recorder.enter(.reconnect)
                guard try await reconnect(expecting: .bootloader) == .bootloader, let back = link else {
                    throw TransferError(.deviceRefused, step: .enterBootloader, "\(device) stayed in its application after the DFU jump")
                }
                (connection, revision) = (back, NordicLegacyDFUDevice.bootloaderRevision)
            }
            link = connection
            return connection
        }

        /// The parts from ``nextPart`` on, each from its Start.
        mutating func transfer() async throws(TryFailure) {
            let total = prepared.totalBytes
            let first = nextPart
            for index in nextPart..<prepared.parts.count {
                let part = prepared.parts[index]
                guard let imageType = NordicLegacyDFUProtocol.imageType(part.name) else {
                    throw .final(TransferError(.badInput, step: .load, "the package's part '\(part.name)' is not one legacy DFU sends"))
                }
                let connection: any Link
                if index == first, let link {
                    connection = link
                } else {
                    do throws(TransferError) {
                        // The device resets into the previous part and waits in its bootloader for this one.
                        connection = try await bootloaderAgain()
                        try await recorder.enterTransfer(closing: connection)
                    } catch { throw .final(error) }
                }
                let began = host.clock.now
                let failure: PartFailure
                let triedAhead = receiptsAhead
                do throws(PartFailure) {
                    packetSize = try await host.send(
                        part, type: imageType, link: connection, interval: &interval, done: done,
                        total: total, statistics: &statistics, activate: activates, receiptsAhead: &receiptsAhead)
                    transferTime += host.clock.now - began
                    await host.context.awaitDisconnect(connection)
                    link = nil
                    done += part.data.count
                    nextPart = index + 1
                    refusal = nil
                    continue
                } catch { failure = error }
                link = nil
                // A write lost while a group went ahead shows only at the end: wait group by group from now on.
                receiptsAhead = false
                switch failure {
                case .final(let error):
                    await connection.close()
                    throw .final(error)
                case .retry(let why, let refused, let lostPackets):
                    transferTime += host.clock.now - began
                    statistics.packetsResent += 1
                    refusal = refused
                    // Start the part again from a clean bootloader (the old application is still in bank 0).
                    try? await connection.send(channel: NordicLegacyChannel.controlPoint.rawValue, [NordicLegacyOperation.reset.rawValue])
                    await host.context.awaitDisconnect(connection)
                    let progressed = index > first
                    // A write lost while groups went ahead: the next try waits for each receipt, which
                    // is the smaller step; a lost write while waiting asks for fewer writes a receipt.
                    if lostPackets, triedAhead { throw .retry(why, counts: false, progressed: progressed) }
                    guard lostPackets, interval > 1 else { throw .retry(why, progressed: progressed) }
                    // Packets were dropped: fewer between receipts, and this try does not count.
                    interval = max(1, interval / 2)
                    host.onEvent(.note("packets were lost: a receipt every \(interval) packets from now on"))
                    throw .retry(why, counts: false, progressed: progressed)
                }
            }
        }

        mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) {
            host.onEvent(.note("\(retry.reason); sending the \(prepared.parts[nextPart].name) again from its start"))
            link = try await bootloaderAgain()
        }

        mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError {
            if let refusal { return refusal }
            return TransferError(
                .verificationFailed, step: .transfer,
                "the \(prepared.parts[nextPart].name) did not arrive whole in \(attempts) tries (\(retry.reason)): try a smaller --window, or move closer to the device")
        }

        mutating func finish() async -> UpdateReport {
            await link?.close()
            if activates { recorder.versionAfter = prepared.version }
            var tuning = host.context.tuning
            tuning.window = Int(interval)
            tuning.packetSize = packetSize
            return recorder.finish(
                bytes: prepared.totalBytes,
                transfer: TransferSummary(streamBytes: statistics.bytesOnWire, packetSize: packetSize, elapsed: transferTime),
                statistics: statistics, tuning: tuning)
        }
    }

    /// Asks how many image bytes the bootloader holds (after a lost receipt).
    func receivedSize(_ link: any Link) async throws(PartFailure) -> NordicLegacyNotification? {
        do {
            try await link.send(channel: NordicLegacyChannel.controlPoint.rawValue, [NordicLegacyOperation.reportReceivedSize.rawValue])
            return try await notification(link, timeout: timeouts.response)
        } catch { throw .retry("the link dropped (\(error))") }
    }

    /// One try of one part; returns the packet size used.
    func send(
        _ part: PreparedImage.Part, type: NordicLegacyImageType, link: any Link, interval: inout UInt16, done: Int, total: Int,
        statistics: inout TransferStatistics, activate: Bool = true, receiptsAhead: inout Bool
    ) async throws(PartFailure) -> Int {
        let control = NordicLegacyChannel.controlPoint.rawValue
        let packetChannel = NordicLegacyChannel.packet.rawValue
        // Chunks of image data must be multiples of 4.
        let packet = link.parameters.dataPerPacket(after: 1, asked: context.askedPacketSize.map { max(4, $0 / 4 * 4) }) / 4 * 4
        func write(_ channel: UInt8, _ bytes: some Collection<UInt8>) async throws(PartFailure) {
            do { try await link.send(channel: channel, bytes) } catch { throw .retry("the link dropped (\(error))") }
        }
        func expect(_ operation: NordicLegacyOperation, timeout: Duration) async throws(PartFailure) {
            var answer: NordicLegacyNotification?
            let deadline = clock.now + timeout
            repeat {
                // A receipt is never the answer waited for (one left over from writes sent ahead).
                do { answer = try await notification(link, timeout: deadline - clock.now) } catch { throw .retry("the link dropped (\(error))") }
            } while answer.map({ if case .receipt = $0 { true } else { false } }) == true && deadline > clock.now
            if case .receipt? = answer { answer = nil }
            switch answer {
            case .response(operation, .success)?: return
            case .response(operation, let status)?:
                let refusal = TransferError(.deviceRefused, step: operation == .validate ? .verify : .transfer, "the bootloader refused \(operation): \(status)")
                // A refusal may come from a write damaged or lost on the way (the sizes, the init
                // packet, an image byte): another try from Start tells; the last one reports it.
                throw .retry("the bootloader answered \(operation): \(status)", refusal: refusal)
            case nil: throw .retry("no answer to \(operation)")
            default: throw .retry("an unexpected answer to \(operation)")
            }
        }
        let sizes: (UInt32, UInt32, UInt32)
        switch type {
        case .application: sizes = (0, 0, UInt32(part.data.count))
        case .softDevice: sizes = (UInt32(part.data.count), 0, 0)
        case .bootloader: sizes = (0, UInt32(part.data.count), 0)
        case .softDeviceAndBootloader:
            let split = min(part.data.count, part.attributes["softdevice-size"] ?? part.data.count / 2)
            sizes = (UInt32(split), UInt32(part.data.count - split), 0)
        }
        var writer = ByteWriter()
        writer.write(sizes.0, .little)
        writer.write(sizes.1, .little)
        writer.write(sizes.2, .little)
        let startSent = clock.now
        try await write(control, [NordicLegacyOperation.startDFU.rawValue, type.rawValue])
        try await write(packetChannel, writer.bytes)
        // Answered once the bank is erased: up to ~90 ms a page.
        try await expect(.startDFU, timeout: timeouts.response + .milliseconds(90) * ((part.data.count + 4095) / 4096))
        let startAnswered = clock.now - startSent
        try await write(control, [NordicLegacyOperation.initParameters.rawValue, 0])
        for start in stride(from: 0, to: part.metadata.count, by: max(1, packet)) {
            try await write(packetChannel, part.metadata[start..<min(start + packet, part.metadata.count)])
        }
        let initSent = clock.now
        try await write(control, [NordicLegacyOperation.initParameters.rawValue, 1])
        try await expect(.initParameters, timeout: timeouts.response)
        // A bootloader whose erase of the bank held Start's answer longer than two round trips (the
        // init packet's answer comes at once) writes flash slowly too, and may queue few writes: a
        // group of 10 sent ahead would wait in its buffers, and one lost means the part again from
        // Start, erase and all. Groups of 3 still go one ahead: with each count request, two of
        // them are what a queue of 4 takes as it works, and the next group is on its way while
        // the first's count comes back. (Waiting for every receipt of 10 instead leaves such a
        // device idle for the receipt's round trip: 24.5 KiB/s on slow-flash, 30.4 with groups of 3.)
        if startAnswered > (clock.now - initSent) * 2, receiptsAhead {
            interval = min(interval, Self.slowBootloaderReceiptInterval)
        }
        try await write(control, [NordicLegacyOperation.receiptRequest.rawValue, UInt8(interval & 0xFF), UInt8(interval >> 8)])
        try await write(control, [NordicLegacyOperation.receiveFirmware.rawValue])
        let began = clock.now
        var offset = 0
        var sinceReceipt = 0
        /// Groups whose counts are due, oldest first: where each ends, and whether a Report Received
        /// Size went behind it (a group sent ahead) rather than its receipt being waited for.
        var due: [(end: Int, asked: Bool)] = []
        /// Whether groups go ahead: each followed by a Report Received Size (07), whose answer comes
        /// once the bootloader has taken every write before it, so its count shows a lost write
        /// exactly, while the next group is on its way. (A receipt cannot: it comes at the device's
        /// n-th write, whichever writes those were, so it reads the same with one lost.) From the
        /// second group, once the first was counted whole; never after a device lost a write.
        var goingAhead = false
        /// Writes per group while groups go ahead: the receipt interval at first, doubled (to at most
        /// four intervals) whenever a Report Received Size had to wait for the one before it — ATT lets
        /// one request out at a time, and its Write Response comes an event after it crossed, so groups
        /// shorter than two connection events would wait on the requests instead of the link — and
        /// after four counts in a row that were in before the host needed them: a device that keeps
        /// up needs counting less, and each Report Received Size takes a write's place on the link. A
        /// multiple of the interval, so the bootloader's receipts still fall on group ends.
        var groupWrites = Int(interval)
        var countsInTime = 0
        /// With a receipt after every write, each awaited before the next goes, what the bootloader
        /// counts is always a true prefix of the part: a write lost on the way leaves the count one
        /// write short and nothing behind it, so the host goes on from the count instead of starting
        /// the part again (Start, its erase, and everything sent). With more writes a receipt, a write
        /// after the lost one lands where the lost one belonged, and only a new try can mend it.
        let resumes = interval == 1 && !receiptsAhead
        /// How long the last few receipts took after their write, while each is awaited alone: a
        /// receipt that has not come in four times the longest is taken for a lost write, and
        /// Report Received Size asks, rather than the response timeout (2 s) passing first.
        var receiptTimes = RecentAnswerWait()
        var lastSent = clock.now
        /// Bytes of the part the bootloader has counted so far.
        var confirmed = 0
        /// One group's count; it must be the group's end. A receipt that does not come is stood in
        /// for by the count the bootloader reports when asked, after everything sent so far.
        func checkCount(_ end: Int, asked: Bool) async throws(PartFailure) {
            var answer: NordicLegacyNotification?
            let wait = resumes ? receiptTimes.wait(atLeast: Self.shortestReceiptWait, atMost: timeouts.response) : timeouts.response
            let deadline = clock.now + wait
            repeat {
                do { answer = try await notification(link, timeout: deadline - clock.now) } catch { throw .retry("the link dropped (\(error))") }
                // Receipts while counts are asked for, or below this group's end, are stale.
                if case .receipt(let bytes)? = answer, asked || Int(bytes) < end { continue }
                break
            } while deadline > clock.now
            var count = answer
            if case .receipt? = answer, asked { count = nil }
            if case .response(let operation, _)? = answer, operation != .receiveFirmware {
                count = nil  // a late answer to something sent twice, not a count
            }
            var expected = end
            if count == nil {
                count = try await receivedSize(link)
                // Asked after every write so far, the count covers them all; the counts still due are stale.
                expected = offset
                due.removeAll()
                receiptsAhead = false
                goingAhead = false
            }
            switch count {
            case .receipt(let bytes)?, .receivedSize(let bytes)?:
                statistics.acknowledgements += 1
                if resumes, case .receipt? = count {
                    receiptTimes.add(clock.now - lastSent)
                }
                if resumes, Int(bytes) < expected, Int(bytes) >= confirmed, Int(bytes) % packet == 0 {
                    // One write per receipt: the count is a prefix; go on from it.
                    statistics.packetsLost += 1
                    statistics.packetsResent += 1
                    offset = Int(bytes)
                    confirmed = offset
                    sinceReceipt = 0
                    return
                }
                // Legacy DFU cannot go back: bytes lost on the way mean the part starts again.
                guard Int(bytes) == expected else {
                    receiptsAhead = false
                    throw .retry("the bootloader counted \(bytes) of \(expected) bytes sent", lostPackets: true)
                }
            case .response(let operation, let status)?:
                throw .retry(
                    "the bootloader stopped the image at \(expected) bytes (\(operation): \(status))",
                    refusal: TransferError(.deviceRefused, step: .transfer, "the bootloader stopped the image at \(expected) bytes: \(operation): \(status)"))
            default:
                statistics.ackTimeouts += 1
                receiptsAhead = false
                throw .retry("no receipt at \(expected) bytes", lostPackets: true)
            }
            if receiptsAhead { goingAhead = true }
            confirmed = expected
            onEvent(
                .progress(
                    TransferProgress(
                        bytesAcknowledged: done + expected, totalBytes: total, packetsSent: statistics.packetsSent,
                        packetsResent: statistics.packetsResent, packetsLost: 0, elapsed: clock.now - began,
                        window: Int(interval), interPacketDelay: .zero)))
        }
        while offset < part.data.count {
            let end = min(offset + packet, part.data.count)
            lastSent = clock.now
            try await write(packetChannel, part.data[offset..<end])
            statistics.packetsSent += 1
            statistics.bytesOnWire += end - offset
            offset = end
            sinceReceipt += 1
            if offset < part.data.count, sinceReceipt >= (goingAhead ? groupWrites : Int(interval)) {
                sinceReceipt = 0
                if goingAhead {
                    let asked = clock.now
                    try await write(control, [NordicLegacyOperation.reportReceivedSize.rawValue])
                    if clock.now - asked > AnswerTiming.waitedForTheRequestBefore, groupWrites < 4 * Int(interval) { groupWrites *= 2 }
                }
                due.append((offset, goingAhead))
            }
            while due.count > (goingAhead ? 1 : 0) {
                let group = due.removeFirst()
                let checking = clock.now
                try await checkCount(group.end, asked: group.asked)
                guard group.asked else { continue }
                countsInTime = clock.now - checking < AnswerTiming.alreadyIn ? countsInTime + 1 : 0
                if countsInTime >= 4, groupWrites < 4 * Int(interval) {
                    groupWrites *= 2
                    countsInTime = 0
                }
            }
        }
        while !due.isEmpty {
            let group = due.removeFirst()
            try await checkCount(group.end, asked: group.asked)
        }
        try await expect(.receiveFirmware, timeout: timeouts.response)
        try await write(control, [NordicLegacyOperation.validate.rawValue])
        try await expect(.validate, timeout: timeouts.response)
        // Activate: the bootloader resets into the image without answering (a test transfer resets without it).
        // The caller waits for the reset's disconnect, outside the transfer's time (as Secure DFU's
        // ends at the last Execute's answer): the Activate is on its way, a Write Request the link
        // still sees answered before it closes.
        try await write(control, [activate ? NordicLegacyOperation.activateAndReset.rawValue : NordicLegacyOperation.reset.rawValue])
        onEvent(
            .progress(
                TransferProgress(
                    bytesAcknowledged: done + part.data.count, totalBytes: total, packetsSent: statistics.packetsSent,
                    packetsResent: statistics.packetsResent, packetsLost: 0, elapsed: clock.now - began,
                    window: Int(interval), interPacketDelay: .zero)))
        return packet
    }

    // MARK: Serial (HCI/SLIP)

    /// Legacy serial DFU's steps for the engine's lifecycle: frames acknowledged one by one,
    /// and nothing else ever comes back — so the host waits the bootloader's worst-case erase
    /// and write times (nRF52832: 89.7 ms a page erase, 102.4 ms a page write), as
    /// adafruit-nrfutil does, and the device's own checks (init packet, CRC) decide silently
    /// whether the image is activated. The link opens on a bootloader (the board was put in it
    /// by hand); every part, with the Stop that validates and activates it, is the transfer;
    /// nothing verifies, reconnects or confirms, so the report claims no version.
    struct SerialFlashSteps: RecordedLifecycleSteps {
        let host: NordicLegacyDFUUpdater
        let prepared: PreparedImage
        var recorder: OperationRecorder
        var link: (any Link)?
        var tries = UpdateTries(limit: 1)
        var statistics = TransferStatistics()
        var transferTime = Duration.zero

        static let pageErase = Duration.microseconds(89_700)
        static let pageWrite = Duration.microseconds(102_400)

        init(host: NordicLegacyDFUUpdater, prepared: PreparedImage, recorder: OperationRecorder, link: any Link) {
            self.host = host
            self.prepared = prepared
            self.recorder = recorder
            self.link = link
        }

        var clock: any BleotaClock { host.clock }

        mutating func connect() async throws(TransferError) -> DeviceMode { .bootloader }
        /// Nothing to reconnect to: the serial line stays open, and the bootloader says nothing of what it booted.
        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode { mode }

        /// Sends one frame; true when the bootloader acknowledged it before the response time ran out.
        func acknowledged(_ payload: [UInt8]) async throws(LinkError) -> Bool {
            try await link!.send(channel: NordicHCILink.frameChannel, payload)
            let deadline = clock.now + host.timeouts.response
            while deadline > clock.now, let message = try await link!.receiveMessage(within: deadline - clock.now, clock: clock) {
                if case .writeResult(NordicHCILink.frameChannel, let code) = message { return code == 0 }
            }
            return false
        }

        mutating func send(_ type: NordicHCILink.PacketType, _ body: [UInt8], step: UpdateStep) async throws(TransferError) {
            var payload = ByteWriter()
            payload.write(type.rawValue, .little)
            payload.write(contentsOf: body)
            do {
                statistics.packetsSent += 1
                statistics.bytesOnWire += payload.bytes.count
                if try await acknowledged(payload.bytes) {
                    statistics.acknowledgements += 1
                    return
                }
            } catch {
                throw TransferError(.linkLost, step: step, "the serial link failed: \(error)")
            }
            // Not acknowledged: the bootloader dropped the frame, and would take the same sequence
            // number again as a duplicate; with no status to ask for, the update cannot go on.
            statistics.ackTimeouts += 1
            throw TransferError(
                .timeout, step: step,
                "the bootloader did not acknowledge a \(type) frame: check the port and that the board is in its serial bootloader")
        }

        func pause(_ duration: Duration) async { try? await clock.sleep(for: duration) }

        mutating func transfer() async throws(TryFailure) {
            do throws(TransferError) { try await sendParts() } catch { throw .final(error) }
        }

        mutating func sendParts() async throws(TransferError) {
            let total = prepared.totalBytes
            let started = clock.now
            defer { transferTime += clock.now - started }
            var done = 0
            for part in prepared.parts {
                guard let type = NordicLegacyDFUProtocol.imageType(part.name) else {
                    throw TransferError(.badInput, step: .load, "the package's part '\(part.name)' is not one legacy DFU sends")
                }
                let softDevice = type == .softDeviceAndBootloader ? min(part.data.count, part.attributes["softdevice-size"] ?? part.data.count / 2) : 0
                var start = ByteWriter()
                start.write(UInt32(type.rawValue), .little)
                switch type {
                case .application:
                    start.write(UInt32(0), .little)
                    start.write(UInt32(0), .little)
                    start.write(UInt32(part.data.count), .little)
                case .softDevice:
                    start.write(UInt32(part.data.count), .little)
                    start.write(UInt32(0), .little)
                    start.write(UInt32(0), .little)
                case .bootloader:
                    start.write(UInt32(0), .little)
                    start.write(UInt32(part.data.count), .little)
                    start.write(UInt32(0), .little)
                case .softDeviceAndBootloader:
                    start.write(UInt32(softDevice), .little)
                    start.write(UInt32(part.data.count - softDevice), .little)
                    start.write(UInt32(0), .little)
                }
                try await send(.start, start.bytes, step: .transfer)
                let pages = part.data.count / 4096 + 1
                await pause(max(.milliseconds(500), Self.pageErase * pages))
                // The whole init packet in one frame, padded to whole words.
                try await send(.initPacket, part.metadata + [0, 0], step: .transfer)
                var frames = 0
                for offset in stride(from: 0, to: part.data.count, by: 512) {
                    let end = min(offset + 512, part.data.count)
                    try await send(.data, Array(part.data[offset..<end]), step: .transfer)
                    if frames % 8 == 0 { await pause(Self.pageWrite) }
                    frames += 1
                    host.context.onEvent(
                        .progress(
                            TransferProgress(
                                bytesAcknowledged: done + end, totalBytes: total, packetsSent: statistics.packetsSent,
                                packetsResent: 0, packetsLost: 0, elapsed: clock.now - started, window: 1,
                                interPacketDelay: .zero)))
                }
                await pause(Self.pageWrite)
                recorder.enter(.activate)
                try await send(.stop, [], step: .activate)
                // Validation, the copy into bank 0 and the reset.
                await pause(Self.pageErase * pages + Self.pageWrite * pages)
                done += part.data.count
                try await recorder.enterTransfer()
            }
        }

        /// Each part's Stop was its activation.
        mutating func activate() async throws(TransferError) -> Bool { true }
        /// Unknown: nothing comes back, so its coming back is all the confirmation there is.
        mutating func runningVersion() async throws(TransferError) -> String? { nil }

        mutating func finish() async -> UpdateReport {
            await link?.close()
            // Nothing confirms what the device runs now, so the report claims no version.
            host.context.onEvent(.note("the serial bootloader reports nothing back: it activates the image only if its init packet and CRC-16 checked out"))
            var tuning = host.context.tuning
            tuning.packetSize = 512
            tuning.window = 1
            return recorder.finish(
                bytes: prepared.totalBytes, transfer: TransferSummary(streamBytes: statistics.bytesOnWire, packetSize: 512, elapsed: transferTime),
                statistics: statistics, tuning: tuning)
        }
    }
}
