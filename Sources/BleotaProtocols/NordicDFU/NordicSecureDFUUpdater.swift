import BleotaCodec
import BleotaEngine
import BleotaLink
import Logging

/// The host half of ``NordicSecureDFUProtocol``: a thin shell that performs
/// what ``NordicDFUTransfer`` decides, one connection per package part.
///
/// connect → (buttonless jump → find the bootloader again by scanning, at
/// address + 1 or the same address after a bonded jump) → for each part:
/// init packet, image, Execute → the device resets into the part; the next
/// part (an application after a SoftDevice and bootloader) goes in a new
/// connection to the bootloader → confirm: the device comes back as its
/// application. Nothing here sleeps for a fixed time: reboots are waited for by
/// reconnecting.
///
/// Tuning knobs mean, for Nordic DFU: `packet-size` the bytes per packet
/// write (default: what the link carries), `window` the packets between
/// receipt notifications (PRN; default: one object's packets), `delay` the pause before the
/// first data object of each connection (default 400 ms, which SDK 15–17
/// bootloaders need to prepare flash; iOS's library waits the same), and
/// `retries` the tries of an object whose CRC disagrees (default 3).
package struct NordicSecureDFUUpdater: ContextHost {
    package var context: HostContext

    /// The pause before the first data object when `delay` is not given.
    package static let defaultFirstObjectDelay = Duration.milliseconds(400)
    /// Name to give the bootloader through the unbonded buttonless service, if any.
    package var bootloaderName: String?

    package init(context: HostContext, bootloaderName: String? = nil) {
        self.context = context
        self.bootloaderName = bootloaderName
    }

    /// Packets between receipt notifications: as given, or one object's packets, so the
    /// receipt for an object's last packet is its checksum (no Calculate Checksum round trip)
    /// and the next object waits for it (the bootloader's 17 packet buffers are never overrun).
    func receiptInterval(packetSize: Int) -> UInt16 {
        if context.explicitKnobs.contains(.window) { return UInt16(clamping: context.tuning.window) }
        return UInt16(clamping: (NordicBootloader.dataObjectMaximum + packetSize - 1) / max(1, packetSize))
    }
    var firstObjectDelay: Duration {
        context.explicitKnobs.contains(.delay) ? context.tuning.interPacketDelay : Self.defaultFirstObjectDelay
    }
    var objectRetries: Int { context.explicitKnobs.contains(.retries) ? max(1, context.tuning.maxRetries) : 3 }

    // MARK: Connections

    /// A connection and what it offers.
    struct Connection: Sendable {
        let link: any Link
        let channels: Set<UInt8>
        var inBootloader: Bool { channels.contains(controlChannel) }
        var buttonless: NordicDFUChannel? { NordicDFUChannel.buttonlessKinds.first { channels.contains($0.rawValue) } }
        /// A serial bootloader (``NordicSerialLink``), which the link says it is.
        var isSerial: Bool { link.parameters.transport == .nordicSerial }
        /// Where requests go: the control point, a characteristic or the serial line's one channel.
        var controlChannel: UInt8 { NordicDFUChannel.controlPoint.rawValue }

        func send(_ request: NordicDFURequest) async throws(LinkError) {
            try await link.send(channel: controlChannel, request.encode())
        }

        /// Object data: on the packet characteristic, or as a Write request (0x08) on a serial line.
        func send(data: ArraySlice<UInt8>) async throws(LinkError) {
            if isSerial {
                try await link.send(channel: controlChannel, CollectionOfOne(NordicDFUOperation.write.rawValue) + data)
            } else {
                try await link.send(channel: NordicDFUChannel.packet.rawValue, data)
            }
        }
    }

    func connect(_ purpose: ConnectPurpose, step: UpdateStep, timeout: Duration? = nil) async throws(TransferError) -> Connection {
        let link: any Link
        do {
            link = try await connector.connect(for: purpose, timeout: timeout ?? timeouts.connect)
        } catch {
            throw TransferError(.linkLost, step: step, "cannot reach \(connector.description): \(error)")
        }
        // What GATT discovery tells a real host: which characteristics are there.
        do { return Connection(link: link, channels: try await context.request(DirectoryRequest(), on: link, step: step)) } catch {
            await link.close()
            throw error
        }
    }

    /// The device found again after its reset (``/BleotaEngine/HostContext/reconnect(after:expecting:timeout:advertisedName:step:greeting:)``),
    /// greeted by what GATT discovery finds, which tells a bootloader from its application.
    func back(after previous: (any Link)?, expecting mode: DeviceMode, advertisedName: String? = nil) async throws(TransferError) -> Connection {
        let context = self.context
        let step: UpdateStep = mode == .bootloader ? .reconnect : .confirm
        let (link, channels) = try await context.reconnect(after: previous, expecting: mode, advertisedName: advertisedName) {
            (link) async throws(TransferError) -> Set<UInt8> in
            try await context.request(DirectoryRequest(), on: link, step: step)
        }
        return Connection(link: link, channels: channels)
    }

    /// The next control point answer, or nil after `timeout`; anything else on the link is skipped.
    func nextAnswer(_ link: any Link, timeout: Duration) async throws(LinkError) -> NordicDFUResponse? {
        let deadline = clock.now + timeout
        while true {
            let left = deadline - clock.now
            guard left > .zero, let packet = try await link.receiveMessage(within: left, clock: clock) else { return nil }
            guard case .packet(let channel, let payload) = packet,
                channel == NordicDFUChannel.controlPoint.rawValue,
                let response = try? NordicDFUResponse(decoding: Array(payload))
            else {
                context.logger.debug("skipping what is not a control point answer: \(packet)")
                continue
            }
            return response
        }
    }

    /// A device in its application with no buttonless service to jump from: the connection
    /// closed, and the error that says what to do.
    func noDFUService(_ connection: Connection) async -> TransferError {
        await connection.link.close()
        return TransferError(
            .unsupported, step: .enterBootloader,
            "\(connector.description) offers neither a DFU bootloader nor a buttonless DFU service: put it in DFU mode (button or reset) and try again")
    }

    /// The buttonless jump's request: optionally name the bootloader, then ask the application
    /// to enter DFU. Returns whether the bootloader was named.
    func requestBootloader(on connection: Connection, kind: NordicDFUChannel) async throws(TransferError) -> Bool {
        let link = connection.link
        func request(_ bytes: [UInt8]) async throws(TransferError) -> NordicButtonless.Status {
            try await context.request(NordicButtonlessRequest(channel: kind, bytes: bytes), on: link, step: .enterBootloader)
        }
        var renamed = false
        if let bootloaderName {
            guard kind == .buttonless else {
                throw TransferError(
                    .unsupported, step: .enterBootloader,
                    "bootloader-name: only the unbonded buttonless service can rename the bootloader, and this device offers the \(kind)")
            }
            guard (1...20).contains(bootloaderName.utf8.count) else {
                throw TransferError(.badInput, step: .enterBootloader, "bootloader-name '\(bootloaderName)' must be 1 to 20 bytes")
            }
            let status = try await request(NordicButtonless.setName(bootloaderName))
            guard status == .success else {
                await link.close()
                throw TransferError(.deviceRefused, step: .enterBootloader, "the device refused the bootloader name '\(bootloaderName)': \(status)")
            }
            renamed = true
        }
        let status = try await request([NordicButtonless.enterBootloader])
        guard status == .success else {
            await link.close()
            throw TransferError(.deviceRefused, step: .enterBootloader, "the device refused to enter its bootloader: \(status)")
        }
        return renamed
    }

    /// The bootloader found again after the jump `link` carried (advertising under the name
    /// given it, if `renamed`); nil, with the connection closed, when the device came back as
    /// its application.
    func findBootloader(after link: any Link, renamed: Bool) async throws(TransferError) -> Connection? {
        // The application resets once its answer is confirmed (the old link is let go once it drops);
        // the bootloader advertises once it has: found by scanning, never a fixed sleep.
        let bootloader = try await back(after: link, expecting: .bootloader, advertisedName: renamed ? bootloaderName : nil)
        guard bootloader.inBootloader else {
            await bootloader.link.close()
            return nil
        }
        return bootloader
    }

    /// The buttonless jump and the bootloader found again, for a part after the first or a
    /// transfer resumed after the device reset into its application.
    func enterBootloader(
        from connection: Connection, kind: NordicDFUChannel,
        recorder: inout OperationRecorder
    ) async throws(TransferError) -> Connection {
        recorder.enter(.enterBootloader)
        let renamed = try await requestBootloader(on: connection, kind: kind)
        recorder.enter(.reconnect)
        guard let bootloader = try await findBootloader(after: connection.link, renamed: renamed) else {
            throw TransferError(.deviceRefused, step: .reconnect, "after the buttonless jump \(connector.description) came back as its application, not its bootloader")
        }
        return bootloader
    }

    // MARK: Flash

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        try await run(prepared, activate: true)
    }

    package func testTransfer(_ bytes: [UInt8]) async throws(TransferError) -> UpdateReport {
        throw realImageRequired("Nordic bootloaders")
    }

    /// The package's last part (the application) sent as flash sends it, with a fresh
    /// init packet, but its last object never executed: then Abort, and the device
    /// resets into what it ran before.
    package func testTransfer(image: PreparedImage) async throws(TransferError) -> UpdateReport {
        try await run(try image.lastPartAlone(), activate: false)
    }

    func run(_ prepared: PreparedImage, activate: Bool) async throws(TransferError) -> UpdateReport {
        var steps = FlashSteps(host: self, prepared: prepared, activates: activate)
        var machine = UpdateStateMachine(expectedVersion: prepared.version)
        return try await machine.run(&steps)
    }

    /// An update's steps as Secure DFU performs them, for the engine's lifecycle: the buttonless
    /// jump when the device runs its application, every part of the package as the transfer
    /// (each part in a connection of its own, the device resetting into it between them), and
    /// the application seen back as the confirmation.
    ///
    /// The bootloader validates and activates each part as it executes its last object
    /// (``NordicLifecycleSteps``). A dropped link resumes where the bootloader stands
    /// (``sendPart``), so a transfer is one try.
    struct FlashSteps: NordicLifecycleSteps {
        let host: NordicSecureDFUUpdater
        let prepared: PreparedImage
        /// False for a test transfer: the last object is never executed.
        let activates: Bool
        var recorder: OperationRecorder
        var tries = UpdateTries(limit: 1)
        var connection: Connection?
        /// Whether the bootloader was named through the buttonless service.
        var renamed = false
        /// A serial bootloader starts the application without a link to see it by.
        var serial = false
        var statistics = TransferStatistics()
        var streamed = 0
        var transferTime = Duration.zero
        var packetSize = 0
        var receipts = 0

        init(host: NordicSecureDFUUpdater, prepared: PreparedImage, activates: Bool) {
            self.host = host
            self.prepared = prepared
            self.activates = activates
            recorder = host.context.recorder(activates ? "flash" : "test-transfer")
            recorder.beginQuietly(.load)
        }

        var link: (any Link)? { connection?.link }
        var device: String { host.connector.description }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            let connection = try await host.connect(.initial, step: .connect)
            self.connection = connection
            if connection.inBootloader { return .bootloader }
            guard connection.buttonless != nil else { throw await host.noDFUService(connection) }
            return .application
        }

        mutating func enterBootloader() async throws(TransferError) -> Bool {
            guard let connection, let kind = connection.buttonless else { return true }
            renamed = try await host.requestBootloader(on: connection, kind: kind)
            return true
        }

        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
            switch mode {
            case .bootloader:
                guard let jumped = connection else { return .application }
                connection = try await host.findBootloader(after: jumped.link, renamed: renamed)
                return connection == nil ? .application : .bootloader
            case .application:
                // A serial bootloader starts the application with no link to see it by; a test transfer activated nothing.
                guard activates, !serial else { return .application }
                // A device that rejected the image at boot would wait in its bootloader.
                let back = try await host.back(after: nil, expecting: .application)
                await back.link.close()
                return back.inBootloader ? .bootloader : .application
            }
        }

        mutating func transfer() async throws(TryFailure) {
            do throws(TransferError) { try await sendParts() } catch { throw .final(error) }
        }

        /// Each part in a connection to the bootloader of its own.
        mutating func sendParts() async throws(TransferError) {
            let total = prepared.totalBytes
            var done = 0
            for (index, part) in prepared.parts.enumerated() {
                guard var connection else { return }
                if index > 0 {
                    // The device resets into the previous part and waits in its bootloader for this one.
                    recorder.enter(.reconnect)
                    connection = try await host.back(after: nil, expecting: .bootloader)
                    if !connection.inBootloader {
                        guard let kind = connection.buttonless else { throw await host.noDFUService(connection) }
                        connection = try await host.enterBootloader(from: connection, kind: kind, recorder: &recorder)
                    }
                    self.connection = connection
                    try await recorder.enterTransfer(closing: connection.link)
                }
                host.onEvent(.note("sending the \(part.name) (\(part.data.count) bytes, init packet \(part.metadata.count) bytes)"))
                let began = host.clock.now
                let outcome = try await host.sendPart(
                    part, connection: &connection, done: done, total: total, statistics: &statistics, activate: activates)
                self.connection = connection
                transferTime += host.clock.now - began
                streamed += outcome.bytesOnWire
                packetSize = outcome.packetSize
                receipts = outcome.receiptInterval
                done += part.data.count
                serial = connection.isSerial
                await connection.link.close()
            }
        }

        mutating func finish() async -> UpdateReport {
            await link?.close()
            if activates { recorder.versionAfter = prepared.version }
            var tuning = host.context.tuning
            tuning.window = receipts
            tuning.packetSize = packetSize
            return recorder.finish(
                bytes: prepared.totalBytes, transfer: TransferSummary(streamBytes: streamed, packetSize: packetSize, elapsed: transferTime),
                statistics: statistics, tuning: tuning)
        }
    }

    struct PartOutcome {
        var bytesOnWire = 0
        var packetSize = 0
        var receiptInterval = 0
    }

    /// One part through the ``NordicDFUTransfer`` machine; reconnects to resume after a dropped link.
    func sendPart(
        _ part: PreparedImage.Part, connection: inout Connection, done: Int, total: Int,
        statistics: inout TransferStatistics, activate: Bool = true
    ) async throws(TransferError) -> PartOutcome {
        var outcome = PartOutcome()
        var resumption = TransferResumption(limit: max(1, context.tuning.maxReconnects))
        let began = clock.now
        var packet = try await packetSize(connection)
        outcome.packetSize = packet
        let interval = receiptInterval(packetSize: packet)
        outcome.receiptInterval = Int(interval)
        var machine = NordicDFUTransfer(
            initPacket: part.metadata, image: part.data, receiptInterval: interval,
            firstObjectDelay: firstObjectDelay, objectRetries: objectRetries,
            timeoutLimit: timeouts.attempts + 1, activates: activate, pipelinesCreate: true)
        var action = machine.start()
        var selectRoundTrip: Duration?
        /// How long the last receipt took after its packet, with a receipt after every packet.
        var receiptLatency = Duration.milliseconds(30)
        func report() {
            onEvent(
                .progress(
                    TransferProgress(
                        bytesAcknowledged: done + machine.executedBytes, totalBytes: total,
                        packetsSent: statistics.packetsSent, packetsResent: statistics.packetsResent,
                        packetsLost: machine.objectsResent, elapsed: clock.now - began,
                        window: Int(machine.receiptInterval), interPacketDelay: .zero)))
        }
        /// Writes `range` of the init packet or image as packets, with the receipts as flow control,
        /// and says what follows; a refusal of a Create sent ahead of its packets ends it early.
        func stream(_ object: NordicDFUObjectType, _ range: Range<Int>) async throws(LinkError) -> NordicDFUTransfer.Action {
            let bytes = object == .command ? part.metadata : part.data
            // Packets of an object: as many as the link needs, rounded up to a multiple of the receipt
            // interval and cut evenly, so that the bootloader's last receipt (it counts from the
            // Create) falls on the object's end and is its checksum: no Calculate Checksum after it.
            var size = packet
            let interval = Int(machine.receiptInterval)
            if object == .data, interval > 1, packet > 0 {
                let needed = (range.count + packet - 1) / packet
                if needed > interval, needed % interval != 0 {
                    let packets = (needed + interval - 1) / interval * interval
                    size = (range.count + packets - 1) / packets
                }
            }
            var offset = range.lowerBound
            var sinceReceipt = 0
            var receiptFailed = false
            var lastReceipt: (offset: UInt32, crc: UInt32)?
            while offset < range.upperBound {
                let end = min(offset + size, range.upperBound)
                try await connection.send(data: bytes[offset..<end])
                statistics.packetsSent += 1
                statistics.bytesOnWire += end - offset
                outcome.bytesOnWire += end - offset
                offset = end
                sinceReceipt += 1
                if object == .data, machine.receiptInterval > 0, sinceReceipt == Int(machine.receiptInterval) {
                    sinceReceipt = 0
                    // Receipts are the flow control: the next packets wait for this one. A Create's
                    // answer may come first; the machine says whether it stops the object.
                    var receipt: (offset: UInt32, crc: UInt32)?
                    // A receipt after every packet: one that does not come soon means the packet was
                    // lost (the bootloader counts only what it got), and a checksum asks where it stands.
                    let perPacket = machine.receiptInterval == 1
                    let sent = clock.now
                    // A receipt that has not come within a few round trips of its group will not come:
                    // a packet was lost, and the bootloader counts only what it got. The object's check
                    // (a receipt at its end, else Calculate Checksum) says so at once instead of after the
                    // full response timeout, which cost `slow-flash`'s first object 2.1 s.
                    let groupWait = selectRoundTrip.map { max(.milliseconds(250), $0 * 8) } ?? timeouts.response
                    let wait = min(timeouts.response, perPacket ? max(.milliseconds(20), receiptLatency * 4) : groupWait)
                    func awaitChecksum(_ wait: Duration) async throws(LinkError) -> NordicDFUTransfer.Action? {
                        let deadline = clock.now + wait
                        while receipt == nil, deadline > clock.now, let answer = try await nextAnswer(connection.link, timeout: deadline - clock.now) {
                            if answer.operation == .calculateChecksum, case .checksum(let at, let crc) = answer.payload {
                                receipt = (at, crc)
                            } else if let next = machine.answered(answer) {
                                return next
                            }
                        }
                        return nil
                    }
                    if let next = try await awaitChecksum(wait) { return next }
                    if receipt != nil, perPacket { receiptLatency = clock.now - sent }
                    if receipt == nil, perPacket {
                        try await connection.send(NordicDFURequest.calculateChecksum)
                        if let next = try await awaitChecksum(timeouts.response) { return next }
                    }
                    if let receipt {
                        statistics.acknowledgements += 1
                        lastReceipt = receipt
                        let at = Int(receipt.offset)
                        if at != offset || receipt.crc != CRC32.checksum(bytes[..<offset]) {
                            // With a receipt for every packet nothing went behind a lost one: what the
                            // bootloader holds of the object is a true prefix, and it goes on from there.
                            if perPacket, at >= range.lowerBound, at < offset, receipt.crc == CRC32.checksum(bytes[..<at]) {
                                statistics.packetsResent += 1
                                offset = at
                                continue
                            }
                            receiptFailed = true  // lost packets: the object's check will fail; stop sending it
                        }
                    } else {
                        statistics.ackTimeouts += 1
                    }
                    if receiptFailed { break }
                }
            }
            let next = machine.streamed(
                receipt: object == .data && offset == range.upperBound
                    ? lastReceipt.flatMap {
                        Int($0.offset) == offset ? $0 : nil
                    } : nil)
            if case .send = next, machine.objectsResent > 0 { statistics.packetsResent = machine.bytesResent / max(1, packet) }
            return next
        }
        report()
        while true {
            do {
                switch action {
                case .finished:
                    report()
                    if !activate {
                        // Nothing was activated: Abort, and the device resets into what it ran.
                        try? await connection.send(NordicDFURequest.abort)
                        await context.awaitDisconnect(connection.link)
                    }
                    return outcome
                case .failed(let error):
                    await connection.link.close()
                    throw error
                case .pause(let delay):
                    try? await clock.sleep(for: delay)
                    action = machine.paused()
                case .send(let request):
                    let sent = clock.now
                    try await connection.send(request)
                    action = try await awaitAnswer(&machine, connection.link)
                    // How long answers take: a Select's is the round trip; a data Create's, the
                    // round trip and the erase, which says whether packets may wait behind it.
                    switch request {
                    case .select(.data): selectRoundTrip = clock.now - sent
                    case .create(.data, _): if let selectRoundTrip { machine.createAnswered(after: clock.now - sent, roundTrip: selectRoundTrip) }
                    default: break
                    }
                    if case .send(.create(.data, _)) = action { report() }
                    if case .finished = action { report() }
                case .stream(let object, let range):
                    action = try await stream(object, range)
                case .createAndStream(let size, let range):
                    // The packets go behind the Create at once; its answer comes with the receipts.
                    try await connection.send(NordicDFURequest.create(.data, size: size))
                    action = try await stream(.data, range)
                case .probeActivation:
                    await connection.link.close()
                    let back = try? await connect(.application, step: .verify, timeout: timeouts.reboot)
                    await back?.link.close()
                    guard let back else {
                        throw TransferError(.timeout, step: .verify, "the device did not come back after the last object: what it runs is unknown")
                    }
                    action = machine.activationProbed(inApplication: !back.inBootloader)
                    if case .finished = action { connection = back }
                }
            } catch let error as TransferError {
                throw error
            } catch {
                // The link dropped: reconnect to the bootloader and let Select say where it stands.
                await connection.link.close()
                try resumption.linkDropped(error, onEvent: onEvent)
                statistics.reconnects += 1
                connection = try await connect(.resume, step: .transfer, timeout: timeouts.reboot)
                if !connection.inBootloader {
                    // It reset into its (still intact) application: jump again; the bootloader kept the init packet.
                    guard let kind = connection.buttonless else {
                        await connection.link.close()
                        throw TransferError(
                            .linkLost, step: .transfer,
                            "the device reset into its application while the \(part.name) was being sent and offers no buttonless jump: put it in DFU mode and run the command again"
                        )
                    }
                    var recorder = context.recorder("resume")
                    connection = try await enterBootloader(from: connection, kind: kind, recorder: &recorder)
                }
                packet = try await packetSize(connection)
                action = machine.start()
            }
        }
    }

    /// Waits for the answer the machine expects, skipping others; a timeout asks the machine what next.
    func awaitAnswer(_ machine: inout NordicDFUTransfer, _ link: any Link) async throws(LinkError) -> NordicDFUTransfer.Action {
        let deadline = clock.now + timeouts.response
        while true {
            let left = deadline - clock.now
            guard left > .zero, let response = try await nextAnswer(link, timeout: left) else { return machine.timedOut() }
            if let next = machine.answered(response) { return next }
        }
    }

    /// Bytes per data write: the link's packets (BLE), or what the serial bootloader's MTU allows after SLIP's worst case.
    func packetSize(_ connection: Connection) async throws(TransferError) -> Int {
        // After the channel byte; over serial, what the MTU allows instead (below).
        var size = connection.link.parameters.dataPerPacket(after: 1, asked: context.askedPacketSize)
        if connection.isSerial {
            let answer = try await context.request(NordicControlPointRequest(.getSerialMTU, on: connection), on: connection.link, step: .transfer)
            guard case .serialMTU(let mtu) = answer.payload else {
                throw TransferError(.deviceRefused, step: .transfer, "the serial bootloader refused Get MTU: \(answer.result)")
            }
            // The write request's opcode and SLIP's doubling of every byte in the worst case.
            size = (Int(mtu) - 1) / 2 - 1
        }
        if connection.isSerial, let asked = context.askedPacketSize { size = min(size, asked) }
        guard size >= 1 else { throw TransferError(.invalidTuning, step: .transfer, "the link carries no data bytes per packet") }
        return size
    }
}
