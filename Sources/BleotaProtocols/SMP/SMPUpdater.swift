import BleotaCodec
import BleotaEngine
import BleotaLink
import Logging

/// How far an SMP upgrade goes: the shared ``/BleotaEngine/FlashMode``.
package typealias SMPUpgradeMode = FlashMode

/// The host half of an MCUmgr/MCUboot update over any ``/BleotaLink/Link``: lifecycle steps
/// for the engine's ``/BleotaEngine/UpdateStateMachine`` — upload (pipelined, resumable, as
/// ``SMPUploadPipeline`` decides), verify the slot's hash, mark, reset, wait for the device to
/// come back by reconnecting (never a fixed sleep), read the image state, confirm — with what
/// the slots say told to the engine as ``SMPSlotReading``s, and reports through the shared
/// ``/BleotaEngine/OperationRecorder``.
///
/// Tuning knobs mean, for SMP: `window` the upload requests in flight (default:
/// the device's buffer count − 1), `packet-size` the data bytes per request
/// (default: what the device's buffer and the link's packets allow); the others
/// have no meaning here.
package struct SMPUpdater: ContextHost {
    package var context: HostContext
    /// Knobs given explicitly (on the command line or by a saved tuning); the rest take SMP's own defaults.
    package var explicitKnobs: Set<TuningKnob>

    package init(context: HostContext, explicitKnobs: Set<TuningKnob>) {
        self.context = context
        self.explicitKnobs = explicitKnobs
    }

    /// The form tests and the benchmark use: window and request size given directly.
    package init(
        connector: any DeviceConnector, clock: any BleotaClock, timeouts: StepTimeouts = StepTimeouts(),
        window: Int? = nil, chunkSize: Int? = nil, logger: Logger = Logger(label: "bleota.smp"),
        onEvent: @escaping @Sendable (UpdateEvent) -> Void = { _ in }
    ) {
        var tuning = TransferTuning()
        var knobs: Set<TuningKnob> = []
        if let window {
            tuning.window = window
            knobs.insert(.window)
        }
        if let chunkSize {
            tuning.packetSize = chunkSize
            knobs.insert(.packetSize)
        }
        self.init(
            context: HostContext(
                protocolName: SMPProtocol.name, connector: connector, clock: clock, tuning: tuning,
                timeouts: timeouts, logger: logger, onEvent: onEvent),
            explicitKnobs: knobs)
    }

    var window: Int? { explicitKnobs.contains(.window) ? context.tuning.window : nil }

    /// Tries of the upgrade's own requests. Their answers (the slot list, ~250 bytes)
    /// span a dozen notifications on a 23-byte MTU, and one lost notification loses
    /// the answer; the tries are cheap (each waits a few round trips), a failed update is not.
    var patience: Int { timeouts.attempts * 6 }

    /// The first request on a new connection is how bleota learns the device is there (over UDP
    /// and serial nothing comes before it), so `--connect-timeout` bounds it: tries of at most
    /// half a second, as many as fit in the connect timeout (and no more than `patience`).
    static func firstContact(connect: Duration, response: Duration, patience: Int) -> (timeout: Duration, attempts: Int) {
        let tries = max(1, min(patience, Int((connect / .milliseconds(500)).rounded(.down))))
        return (min(response, connect / tries), tries)
    }
    var chunkSize: Int? { explicitKnobs.contains(.packetSize) ? context.tuning.packetSize : nil }

    /// What an upload did, for reports and the benchmark.
    package struct UploadResult: Sendable {
        package var bytes: Int
        package var elapsed: Duration = .zero
        package var requests = 0
        package var resentBytes = 0
        /// Requests that carried bytes sent before.
        package var resentRequests = 0
        package var reconnects = 0
        package var lossEvents = 0
        package var window = 0
        package var chunkSize = 0
    }

    // MARK: Steps shared by the operations

    func fail(_ step: UpdateStep, _ error: SMPClientError) -> TransferError {
        switch error {
        case .timeout: TransferError(.timeout, step: step, error.description)
        case .linkLost: TransferError(.linkLost, step: step, error.description)
        case .malformed, .sequence, .field: TransferError(.protocolViolation, step: step, error.description)
        case .device(let deviceError): TransferError(.deviceRefused, step: step, deviceError.description)
        }
    }

    func connect(
        _ purpose: ConnectPurpose, step: UpdateStep, timeout: Duration? = nil, firstSequence: UInt8 = 0
    )
        async throws(TransferError) -> SMPConnection
    {
        do {
            let link = try await connector.connect(for: purpose, timeout: timeout ?? timeouts.connect)
            return SMPConnection(link: link, clock: clock, firstSequence: firstSequence)
        } catch {
            throw TransferError(.linkLost, step: step, "cannot reach \(connector.description): \(error)")
        }
    }

    /// The shape of an upload on `link`: requests in flight, data per request while
    /// the link is clean, and the data that keeps a request within one link packet.
    func uploadConfiguration(_ parameters: MCUmgrParameters, link: any Link, total: Int) -> SMPUploadPipeline.Configuration {
        let window = max(1, window ?? (parameters.bufferCount - 1))
        let payload = link.parameters.preferredPayload
        // The device's buffer holds a whole request, header included (Zephyr drops a longer one).
        func data(first: Bool) -> Int {
            var bytes = parameters.bufferSize
            // Fill whole link packets: a request of k full packets, not k and a sliver — less a
            // few bytes, so that the cuts SMPWriteShape moves earlier do not spill into one more.
            if payload < bytes { bytes = bytes / payload * payload - min(8, payload / 8) }
            var chunk = max(1, SMPUploadRequest.dataCapacity(within: bytes, maximumOffset: total, first: first))
            if let chunkSize { chunk = min(chunk, max(1, chunkSize)) }
            return chunk
        }
        let within = min(payload, parameters.bufferSize)
        let single = SMPUploadRequest.dataCapacity(within: within, maximumOffset: total, first: false)
        // A one-packet request is worth it only with room for a useful amount of data.
        let singlePacket = single >= 64 ? min(single, data(first: false)) : nil
        return SMPUploadPipeline.Configuration(
            total: total, chunk: data(first: false), firstChunk: data(first: true),
            singlePacketChunk: singlePacket, window: window,
            maximumAnswerTimeout: timeouts.response,
            // Timeouts in a row before giving up: on a link that loses a fifth of its
            // packets a request of a few packets fails more often than not, yet the
            // upload still moves; a dead link takes about as long to give up on as
            // the native protocol's stall limit.
            stallLimit: timeouts.attempts * 6,
            // A device that has answered and then goes quiet for good (its battery died, it went out
            // of range) is given up on after twice the patience of one request (20 s by default), not
            // after the stall limit's worth of growing timeouts (about a minute).
            silenceLimit: timeouts.response * (timeouts.attempts * 2), measuresWindow: self.window == nil)
    }

    /// After a lost answer on a link where requests span several packets: a
    /// Zephyr device may hold a half-received request, to which it appends
    /// whatever comes next (it has no timeout). Writes of a whole link packet,
    /// filled with 0xFF, either overflow such a partial request (the device
    /// then drops it and the write), or complete it with bytes that are no
    /// CBOR (refused), or, with no partial request, read as a header far longer
    /// than its buffer and are dropped as well — so the next request starts clean.
    ///
    /// With `bufferSize`, enough of them to clear any half request (after a
    /// timeout); without, three (after a go-back, an answer that showed a loss),
    /// which clear one that lacks less than a link packet even when one or two
    /// of them are lost. That matters for short requests: a stale request
    /// missing its last write, completed by the last write of a resend whose
    /// first was lost, would decode — the stale request's start with the
    /// resend's `off` — and be written where the device stands.
    func flushPartialRequest(_ connection: SMPConnection, clearing bufferSize: Int? = nil) async throws(SMPClientError) {
        let size = max(1, connection.link.parameters.maximumPayload)
        let filler = [UInt8](repeating: 0xFF, count: size)
        let count = bufferSize.map { $0 / size + 2 } ?? 3
        for _ in 0..<count {
            do { try await connection.link.send(filler) } catch { throw .linkLost(error) }
        }
    }

    /// Uploads `image` from wherever the device already is; resumes after a dropped link.
    func upload(
        _ image: [UInt8], sha: [UInt8], connection start: SMPConnection,
        parameters: MCUmgrParameters, upgrade: Bool = false, imageNumber: Int = 0, progress: (base: Int, total: Int, since: Duration)? = nil
    ) async throws(TransferError) -> (UploadResult, SMPConnection) {
        var connection = start
        let began = clock.now
        let configuration = uploadConfiguration(parameters, link: connection.link, total: image.count)
        var pipeline = SMPUploadPipeline(configuration)
        let shape = SMPWriteShape(payload: connection.link.parameters.preferredPayload, bufferSize: parameters.bufferSize)
        connection.shapeWrites(shape)
        var result = UploadResult(bytes: image.count)
        var resumption = TransferResumption(limit: timeouts.attempts)
        result.window = configuration.window
        result.chunkSize = configuration.chunk
        var restarts = 0
        var lossNoted = false
        var busyNoted = false
        var lossesFlushed = 0
        /// After an answer that showed a loss, and before anything is resent: clear a stale half request.
        func flushAfterLoss() async throws(SMPClientError) {
            guard configuration.requestsSpanPackets, pipeline.lossEvents > lossesFlushed else { return }
            lossesFlushed = pipeline.lossEvents
            try await flushPartialRequest(connection)
        }
        /// After an answer: clear a stale half request if it showed a loss, and say once that packets are lost.
        func afterLoss() async throws(SMPClientError) {
            try await flushAfterLoss()
            if !lossNoted, pipeline.lossEvents > 0 {
                lossNoted = true
                onEvent(
                    .note(
                        configuration.requestsSpanPackets
                            ? "packets are being lost: sizing the upload requests to the loss rate (bigger again after clean answers), so a lost write costs less"
                            : "packets are being lost: resending from the device's offset"))
            }
        }
        func report() {
            onEvent(
                .progress(
                    TransferProgress(
                        bytesAcknowledged: (progress?.base ?? 0) + pipeline.confirmed, totalBytes: progress?.total ?? image.count,
                        packetsSent: pipeline.requests, packetsResent: pipeline.resentRequests,
                        packetsLost: pipeline.lossEvents, elapsed: clock.now - (progress?.since ?? began),
                        window: pipeline.window, interPacketDelay: .zero)))
        }
        report()
        while true {
            do throws(SMPClientError) {
                switch pipeline.nextAction() {
                case .done:
                    result.elapsed = clock.now - began
                    result.requests = pipeline.requests
                    result.resentBytes = pipeline.resentBytes
                    result.resentRequests = pipeline.resentRequests
                    result.lossEvents = pipeline.lossEvents
                    report()
                    return (result, connection)
                case .send(let offset, let end, let first):
                    let request =
                        first
                        ? SMPUploadRequest(
                            image: imageNumber, offset: 0, data: Array(image[0..<end]), length: image.count, sha: sha, upgrade: upgrade)
                        : SMPUploadRequest(offset: offset, data: Array(image[offset..<end]))
                    let number = try await connection.send(SMPUploadRequest.operation, command: SMPUploadRequest.command, body: request.body)
                    pipeline.sent(sequence: number, offset: offset, end: end, at: clock.now)
                case .wait(let timeout):
                    // Waiting for an answer that is overdue: an echo, answered only after every
                    // request before it, tells a lost request from a slow device (the pipeline
                    // offers a probe delay only when it is a quarter of the timeout or less).
                    let probeDelay = pipeline.probeDelay
                    let next: SMPPacket?
                    do { next = try await connection.nextResponse(timeout: probeDelay ?? timeout) } catch .malformed {
                        // A damaged answer: its request is answered again or times out.
                        connection.resetReassembly()
                        continue
                    }
                    if next != nil { pipeline.heard(at: clock.now) }
                    guard let response = next else {
                        if probeDelay != nil {
                            let number = try await connection.send(
                                SMPEchoRequest.operation, command: SMPEchoRequest.command,
                                body: SMPEchoRequest(text: "probe").body)
                            pipeline.probeSent(sequence: number)
                            continue
                        }
                        connection.resetReassembly()
                        let spanned = configuration.requestsSpanPackets
                        guard pipeline.timedOut(at: clock.now) else {
                            throw SMPClientError.timeout(
                                "the upload at offset \(pipeline.confirmed)"
                                    + (pipeline.wentSilent
                                        ? " for \(Int((clock.now - (pipeline.lastHeard ?? clock.now)).seconds.rounded())) s: the device answers nothing (gone, or out of range)"
                                        : ""))
                        }
                        if spanned { try await flushPartialRequest(connection, clearing: parameters.bufferSize) }
                        lossesFlushed = pipeline.lossEvents
                        continue
                    }
                    if response.header.smpCommand == .echo, case .moved = pipeline.probeAnswered(sequence: response.header.sequence) {
                        report()
                        try await afterLoss()
                        continue
                    }
                    guard response.header.smpCommand == .imageUpload else { continue }  // a stray answer to something else
                    if let error = SMPDeviceError(response: response.body) {
                        if Self.backPressure.contains(error.code) {
                            // Alive, and asking for less at once: the same offset again, fewer in flight, after a pause.
                            let pause = pipeline.busy(sequence: response.header.sequence)
                            if pipeline.isStalled { throw SMPClientError.device(error) }
                            guard pause > .zero else { continue }
                            if !busyNoted {
                                busyNoted = true
                                onEvent(
                                    .note(
                                        "the device has no buffer for more (\(error.code.name)): \(pipeline.window) request\(pipeline.window == 1 ? "" : "s") in flight, resending from offset \(pipeline.confirmed)"
                                    ))
                            }
                            do { try await clock.sleep(for: pause) } catch { throw SMPClientError.linkLost(.cancelled) }
                            continue
                        }
                        // A request that arrived damaged (its CBOR, its offset, its length or header
                        // no longer make sense) is refused; the device then stands where it was, or
                        // has forgotten the upload and says so at the next answer. Anything else is
                        // the device's verdict.
                        guard Self.damagedRequest.contains(error.code) else { throw SMPClientError.device(error) }
                        let refusedBefore = pipeline.refusedChunk
                        pipeline.refused(
                            sequence: response.header.sequence,
                            cut: error.code == .general(.corrupt) && !configuration.requestsSpanPackets)
                        if let refused = pipeline.refusedChunk, refused != refusedBefore {
                            onEvent(
                                .note(
                                    "the device refused requests of \(refused) data bytes as cut short (\(error.code.name)): it reads less of a datagram than its buffer holds; sending \(pipeline.chunkLimit) a request (give udp://…?datagram=N to say so)"
                                ))
                        }
                        if pipeline.isStalled { throw SMPClientError.device(error) }
                        try await flushAfterLoss()
                        continue
                    }
                    guard let answer = try? SMPUploadResponse(body: response.body) else { continue }  // damaged: its request times out
                    switch pipeline.answered(sequence: response.header.sequence, offset: answer.offset, match: answer.match, at: clock.now) {
                    case .progress:
                        report()
                    case .moved(let offset):
                        if offset > 0, pipeline.requests == 1 || (!lossNoted && offset > configuration.chunk && pipeline.resentBytes == 0) {
                            onEvent(.note("the device already holds \(offset) of \(image.count) bytes; resuming"))
                        }
                        report()
                    case .ignored:
                        if pipeline.isStalled { throw SMPClientError.sequence("the device keeps answering without taking data (offset \(pipeline.confirmed))") }
                    case .mismatch:
                        restarts += 1
                        guard restarts <= 4 else {
                            throw SMPClientError.device(SMPDeviceError(.image(.invalidHash), reason: "the device's SHA-256 of the upload does not match, \(restarts) times"))
                        }
                        onEvent(.note("the device's SHA-256 of the upload did not match; uploading again"))
                    }
                    try await afterLoss()
                }
            } catch .linkLost(let error) {
                await connection.close()
                try resumption.linkDropped(error, onEvent: onEvent)
                result.reconnects = resumption.reconnects
                connection = try await connect(.resume, step: .transfer)
                connection.shapeWrites(shape)
                pipeline.reconnected()
            } catch {
                throw fail(.transfer, error)
            }
        }
    }

    /// Answers that mean "not now": the device is alive but has no room for the request (Zephyr's
    /// SMP layer answers `MGMT_ERR_ENOMEM` when no buffer is free for the answer, its data unwritten).
    static let backPressure: Set<SMPErrorCode> = [.general(.noMemory), .general(.busy)]

    /// Answers that mean the request arrived damaged rather than refused on its merits.
    static let damagedRequest: Set<SMPErrorCode> = [
        .general(.invalidArgument), .image(.invalidOffset), .image(.invalidLength), .image(.invalidImageHeader),
        .image(.invalidImageHeaderMagic), .image(.imageDataOverrun), .general(.corrupt),
    ]

    // MARK: Flash

    /// Runs the upgrade of `imageBytes` (an MCUboot image) in `mode`.
    package func upgrade(imageBytes: [UInt8], mode: FlashMode) async throws(TransferError) -> UpdateReport {
        try await flash(try SMPProtocol.prepare(imageBytes, path: "the image", keyPath: nil), mode: mode)
    }

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        var parts: [FlashSteps.Part] = []
        var variants: [FlashSteps.Part] = []
        for part in prepared.parts {
            let image: MCUbootImage
            do { image = try MCUbootImage(decoding: part.data) } catch {
                throw TransferError(.badInput, step: .load, "\(part.name) is not an MCUboot image: \(error)")
            }
            guard let hash = image.hashTLV else { throw TransferError(.badInput, step: .load, "\(part.name) has no SHA-256 TLV") }
            let number = part.attributes[SMPProtocol.imageNumberAttribute] ?? 0
            let flashed = FlashSteps.Part(
                number: number, image: part.data, hash: hash, version: image.version.description,
                reading: SMPSlotReading([], hash: hash, decompressedHash: image.decompressedHash, image: number),
                xipSlot: part.attributes[SMPProtocol.xipSlotAttribute])
            if flashed.xipSlot != nil {
                // A direct-XIP pair: the first variant stands for the image until connect picks one.
                variants.append(flashed)
                if variants.count > 1 { continue }
            }
            parts.append(flashed)
        }
        guard !parts.isEmpty else { throw TransferError(.badInput, step: .load, "nothing to flash") }
        var steps = FlashSteps(host: self, parts: parts, mode: mode)
        steps.variants = variants
        steps.refusesDowngrade = prepared.refusesDowngrade ? MCUbootImage.Version(parsing: steps.version) : nil
        steps.cohort = prepared.fromVersions.isEmpty ? nil : prepared
        // The application takes the image (MCUmgr runs beside it); an upload-only flash ends at the
        // verification; MCUboot's slots say what a repeated mark, reset or confirm would mend.
        var machine = UpdateStateMachine(
            expectedVersion: steps.version, applicationReceives: true, activates: mode != .upload, maximumRepeats: 3)
        return try await machine.run(&steps)
    }

    /// An MCUmgr/MCUboot upgrade's steps for the engine's lifecycle: connecting reads the slots
    /// (an image already running or staged is not uploaded again), the transfer is the pipelined
    /// upload of each image to its image's secondary slot, the verification each image listed
    /// there, the activation the marks (test or permanent; image 1 before image 0, which nRF
    /// Connect SDK's MCUboot needs, NCSDK-34106) and one reset, and the confirmation the slots read
    /// back, with the confirm the mode asks for. What the slots say goes to the engine as reports
    /// (``SMPSlotReading``), so a mark, reset or confirm that never arrived is repeated by the
    /// engine's rules, the same that repeat any protocol's lost requests.
    ///
    /// The engine follows one image, the lead: image 0 when the update has it, else the one image
    /// flashed (`flash --image N`). Every other image is checked beside it at each step, and a
    /// failure names the image.
    struct FlashSteps: RecordedLifecycleSteps {
        /// One image of the update, for MCUboot's image (core) `number`.
        struct Part: Sendable {
            var number: Int
            var image: [UInt8]
            var hash: [UInt8]
            var version: String
            /// Its slots, as last read.
            var reading: SMPSlotReading
            /// For one variant of a direct-XIP pair: the slot it is linked for.
            var xipSlot: Int? = nil
        }

        /// A direct-XIP pair's variants (one image, one per slot), of which connect picks the one for
        /// the slot the device does not run; empty otherwise.
        var variants: [Part] = []
        /// Whether the activation marks the images: not under direct-XIP without revert, where
        /// MCUboot boots the highest version whatever is marked (bootloader info mode 4).
        var marks = true

        let host: SMPUpdater
        let mode: FlashMode
        var parts: [Part]
        /// The part the engine follows (``parts``' image 0, or the only one).
        let lead: Int
        var recorder: OperationRecorder
        /// Uploads whose image the device does not list go again, once, resuming from what it holds.
        var tries = UpdateTries(limit: 2)
        var connection: SMPConnection?
        var parameters: MCUmgrParameters?
        var result: UploadResult
        /// Whether the slots were read on this connection since the last request that changes them.
        var fresh = false
        /// Readings repeated before a negative verdict (an answer damaged on the way can show a
        /// wrong hash, so "not our image" is believed only once read again), over the whole upgrade.
        var rereads = 0
        static let maximumRereads = 2
        var activations = 0
        /// What the device ran when the upgrade started.
        var versionBefore: String?
        /// The device already ran the image when it connected.
        var targetAtConnect: UpdateStateMachine.DeviceReport?
        /// A probe found the device needing a step again: the step says so.
        var afterProbe = false
        /// Whether the first try found the image staged already and sent nothing.
        var uploadSkipped = false
        /// The image's version when only a device running an older one may take it (`--no-downgrade`):
        /// checked at connect, and sent as the upload's `upgrade` flag so that the device checks it too.
        var refusesDowngrade: MCUbootImage.Version?
        /// The image when only a device running one of its ``PreparedImage/fromVersions`` may take
        /// it (a campaign's `--from-version`): checked at connect, against what the device runs.
        var cohort: PreparedImage?
        /// The lead is for a core the device cannot read, and its update left its slot at the reset.
        var leadCopied = false

        init(host: SMPUpdater, parts: [Part], mode: FlashMode) {
            self.host = host
            self.parts = parts
            self.mode = mode
            lead = parts.firstIndex { $0.number == 0 } ?? 0
            recorder = host.context.recorder("flash")
            recorder.beginQuietly(.load)
            result = UploadResult(bytes: parts.reduce(0) { $0 + $1.image.count })
        }

        /// The lead's reading: what the engine is told.
        var reading: SMPSlotReading {
            get { parts[lead].reading }
            set { parts[lead].reading = newValue }
        }
        var version: String { parts[lead].version }
        var hash: [UInt8] { parts[lead].hash }
        var totalBytes: Int { parts.reduce(0) { $0 + $1.image.count } }

        var link: (any Link)? { connection?.link }
        var timeouts: StepTimeouts { host.timeouts }

        /// A failure that leaves the device running what it ran at connect (nothing was sent, or
        /// nothing marked): the error with that as its outcome.
        func oldImageFailure(_ code: TransferError.Code, step: UpdateStep, _ message: String) -> TransferError {
            var error = TransferError(code, step: step, message)
            error.outcome = versionBefore.map { .oldImage($0) }
            return error
        }

        func note(_ text: String) { host.onEvent(.note(text)) }

        /// What every part reads from one slot list.
        mutating func take(_ slots: [SMPImageSlot]) {
            for index in parts.indices { parts[index].reading.slots = slots }
        }

        /// "image 1 (2.0.0)" where the update has several images or is not for image 0.
        func name(_ part: Part) -> String { "image \(part.number) (\(part.version))" }

        /// As every recorded host's, except that MCUboot's return from the reset (a swap that takes
        /// seconds) is a step of its own in SMP's reports, not part of the confirmation.
        mutating func entering(_ step: UpdateStep, for action: UpdateStateMachine.Action) async throws(TransferError) {
            switch action {
            case .transfer: try await recorder.enterTransfer(closing: link)
            case .fail, .probe, .finish: break
            case .reconnect: recorder.enter(.reconnect)
            default: recorder.enter(step)
            }
        }

        /// Reads the slots on the open connection.
        mutating func read(_ step: UpdateStep) async throws(TransferError) {
            do {
                take(try await connection!.imageState(timeout: timeouts.response, attempts: host.patience))
            } catch { throw host.fail(step, error) }
            fresh = true
        }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            connection = try await host.connect(.initial, step: .connect)
            do {
                let first = SMPUpdater.firstContact(connect: timeouts.connect, response: timeouts.response, patience: host.patience)
                parameters = try await connection!.parameters(timeout: first.timeout, attempts: first.attempts)
            } catch { throw host.fail(.connect, error) }
            try await read(.connect)
            versionBefore = reading.active?.version
            // Its firmware loader (slot 1) is an update under way, whatever the application was.
            if reading.active?.slot != 1, let refusal = cohort?.otherVersionRefusal(running: versionBefore) { throw refusal }
            if !variants.isEmpty { try await pickVariant() }
            try refuseUnmetDependencies()
            var info: SMPSlotInfo?
            do { info = try await connection!.slotInfo(timeout: timeouts.response) } catch {
                host.logger.debug("no slot info (\(error)): the device checks the image's size at the upload")
            }
            let uploadable = info?.images.first { $0.image == 0 }?.slots.contains { $0.uploadImageID != nil }
            // The mode decides the flow where the slots leave it open: no slot to upload to (a firmware
            // loader, or single-slot), slot 1 running (a loader, or in place), or a direct-XIP pair.
            var bootMode: Int?
            if uploadable != true || reading.active?.slot == 1 || !variants.isEmpty, reading.running == nil || parts.count > 1 {
                bootMode = (try? await connection!.bootloaderInfo(timeout: timeouts.response))?.mode
            }
            switch bootMode {
            case 7? where parts.count == 1:
                try await enterFirmwareLoader()
                info = try? await connection!.slotInfo(timeout: timeouts.response)
            case 0?, 8?:
                throw oldImageFailure(
                    .deviceRefused, step: .connect,
                    "the device's MCUboot is single-slot (mode \(bootMode!), \(SMPBootloaderInfo.modeName(bootMode!))): the application has no slot for an update, so nothing was sent; update it through MCUboot's serial recovery (the bootloader's SMP on its serial console: hold the device in recovery and flash --device serial://…)"
                )
            case 4?, 6?:
                // Direct-XIP without revert and RAM load boot the highest version whatever is marked.
                marks = false
                if mode == .test || mode == .confirm {
                    note(
                        "\(SMPBootloaderInfo.modeName(bootMode!)) (mode \(bootMode!)): MCUboot boots the highest version for good, so --mode \(mode.rawValue) is an upload and a reset"
                    )
                }
            default: break
            }
            try refuseIfTooLarge(info)
            if let newer = refusesDowngrade, let running = versionBefore.map(MCUbootImage.Version.init(parsing:)), running >= newer {
                throw oldImageFailure(
                    .deviceRefused, step: .connect,
                    "the device runs \(running), not older than the image's \(newer), and --no-downgrade refuses that: nothing was sent")
            }
            for part in parts where !part.reading.primaryReadable && mode != .upload {
                note(
                    "\(name(part)) is for a core whose flash the device cannot read (no slot 0 listed for image \(part.number)): MCUboot copies it over at the reset, with no test boot and no way back\(mode == .test ? ", so --mode test updates it for good" : ""); that its slot empties afterwards is the check"
                )
            }
            if parts.count == 1, reading.running != nil {
                note("the device already runs this image (\(version))")
                targetAtConnect = reading.report(mode)
            }
            return .application
        }

        /// An image's dependency TLVs (`IMAGE_TLV_DEPENDENCY`: another image at a minimum version),
        /// checked before anything is sent against what the update brings for that image, else what
        /// the device lists running there; MCUboot would refuse the image at boot. One the device
        /// cannot show (an nRF5340's network core) is said, not guessed.
        mutating func refuseUnmetDependencies() throws(TransferError) {
            for part in parts {
                guard let image = try? MCUbootImage(decoding: part.image) else { continue }
                for dependency in image.dependencies {
                    let provided: (version: String, source: String)
                    if let other = parts.first(where: { $0.number == dependency.image }) {
                        provided = (other.version, "the update brings \(other.version) for it")
                    } else if let active = part.reading.slots.first(where: { $0.image == dependency.image && $0.active }) {
                        provided = (active.version, "the device's image \(dependency.image) runs \(active.version)")
                    } else {
                        note("\(name(part)) needs \(dependency), which bleota cannot check: the device does not show what image \(dependency.image) runs")
                        continue
                    }
                    guard MCUbootImage.Version(parsing: provided.version) < dependency.minimumVersion else { continue }
                    throw oldImageFailure(
                        .deviceRefused, step: .connect,
                        "\(name(part)) needs \(dependency), but \(provided.source): nothing was sent; update image \(dependency.image) first, or with it (MCUboot would refuse the image at boot)"
                    )
                }
            }
        }

        /// Direct-XIP: each slot runs in place, so the image must be the variant linked for the slot the
        /// device does not run (MCUboot boots an image only from the slot it is linked for). Which mode
        /// (bootloader info): without revert the image boots by its version, with no marks.
        mutating func pickVariant() async throws(TransferError) {
            let number = variants[0].number
            guard let index = parts.firstIndex(where: { $0.number == number }) else { return }
            let runningSlot = parts[index].reading.active?.slot ?? 0
            let free = 1 - runningSlot
            guard var chosen = variants.first(where: { $0.xipSlot == free }) else {
                throw oldImageFailure(
                    .deviceRefused, step: .connect,
                    "the update's image \(number) is linked only for slot \(runningSlot), which the device runs (direct-XIP), so it cannot go to slot \(free): nothing was sent; give the package with both variants (an NCS direct-XIP build makes mcuboot_secondary_app.bin too)"
                )
            }
            chosen.reading.slots = parts[index].reading.slots
            parts[index] = chosen
            note("direct-XIP: the device runs slot \(runningSlot), so the variant linked for slot \(free) goes")
        }

        /// MCUboot's firmware-loader mode (bootloader info mode 7): the application has no slot for an
        /// upload; reset with `boot_mode` 1 (Zephyr 4.2), MCUboot boots the loader, a small MCUmgr
        /// application at its own address, which writes the upload over the application in slot 0.
        /// Nothing is marked (what is in slot 0 boots if it verifies), so the activation is a reset.
        /// A device found in its loader already (slot 1 runs) is updated from there.
        mutating func enterFirmwareLoader() async throws(TransferError) {
            marks = false
            guard reading.active?.slot != 1 else {
                versionBefore = reading.own.first { $0.slot == 0 }?.version
                note("the device runs its firmware loader already (slot 1): the image goes over the application in slot 0")
                return
            }
            note(
                "firmware loader (MCUboot mode 7): the application resets into its loader (boot mode 1), which writes the image over the application; no test or confirm\(mode == .test ? ", so --mode test updates it for good" : "")"
            )
            recorder.enter(.enterBootloader)
            try await host.sendReset(connection!, bootMode: SMPResetRequest.bootLoaderMode, step: .enterBootloader)
            await connection?.close()
            recorder.enter(.reconnect)
            connection = try await host.waitForReturn(for: .bootloader, advertisedName: host.context.options[SMPProtocol.HostOptions.loaderName])
            do {
                parameters = try await connection!.parameters(timeout: timeouts.response, attempts: host.patience)
            } catch { throw host.fail(.reconnect, error) }
            try await read(.reconnect)
            guard reading.active?.slot == 1 else {
                throw oldImageFailure(
                    .deviceRefused, step: .enterBootloader,
                    "the device came back running its application, not its firmware loader: it did not take the reset's boot mode (Zephyr's CONFIG_MCUMGR_GRP_OS_RESET_BOOT_MODE); start the loader by hand (its button or pin) and flash again"
                )
            }
        }

        /// Refuses, from the device's slot info, an image that does not fit its slot, or is for an image
        /// the device does not have, before a byte is sent; a device that does not answer slot info
        /// refuses such an image at its first upload request ("image too large", rc 30, or "no free slot").
        mutating func refuseIfTooLarge(_ info: SMPSlotInfo?) throws(TransferError) {
            guard let info else { return }
            for part in parts {
                guard info.images.contains(where: { $0.image == part.number }) else {
                    throw oldImageFailure(
                        .deviceRefused, step: .connect,
                        "the update has \(name(part)) but the device has no image \(part.number) (its slot info lists image \(info.images.map { String($0.image) }.joined(separator: ", "))): nothing was sent; give the package built for this device, or --image with one of those"
                    )
                }
                guard let limit = info.uploadLimit(image: part.number), part.image.count > limit else { continue }
                throw oldImageFailure(
                    .deviceRefused, step: .connect,
                    "\(parts.count > 1 || part.number != 0 ? "\(name(part)) is" : "the image is") \(part.image.count) bytes but the device's slot for it holds \(limit) (its slot info): nothing was sent; build a smaller image (or one compressed) or give the device larger slots"
                )
            }
        }

        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
            connection = try await host.waitForReturn()
            fresh = false
            return .application
        }

        mutating func transfer() async throws(TryFailure) {
            if result.requests == 0, !uploadSkipped, parts.allSatisfy({ $0.reading.staged != nil }) {
                uploadSkipped = true
                note("the image\(parts.count > 1 ? "s are" : " is") already in the secondary slot\(parts.count > 1 ? "s" : ""); skipping the upload")
                return
            }
            uploadSkipped = false
            do throws(TransferError) {
                var thisTry = UploadResult(bytes: 0)
                var base = 0
                let since = host.clock.now
                for part in parts {
                    defer { base += part.image.count }
                    // Of several images, one the device already lists (read at connect, or at the
                    // verification before this try) is not sent again.
                    if parts.count > 1, part.reading.staged != nil {
                        note("\(name(part)) is already in its secondary slot; not sending it again")
                        continue
                    }
                    if parts.count > 1 { note("uploading \(name(part)), \(part.image.count) bytes") }
                    let uploaded: UploadResult
                    (uploaded, connection) = try await host.upload(
                        part.image, sha: SHA256Digest.hash(part.image), connection: connection!, parameters: parameters!,
                        upgrade: refusesDowngrade != nil && part.number == parts[lead].number, imageNumber: part.number,
                        progress: (base, totalBytes, since))
                    thisTry = host.accumulate(thisTry, uploaded)
                }
                result = host.merge(result, thisTry)
            } catch { throw .final(error) }
            fresh = false
        }

        mutating func verify() async throws(TryFailure) -> (ok: Bool, detail: String) {
            do throws(TransferError) {
                try await read(.verify)
                while parts.contains(where: { $0.reading.staged == nil }), rereads < Self.maximumRereads {
                    rereads += 1
                    try await read(.verify)
                }
            } catch { throw .final(error) }
            if let missing = parts.first(where: { $0.reading.staged == nil }) {
                // An answer damaged on the way can make an upload look finished when it is not:
                // upload again; the device resumes from what it holds. A skipped upload was no try.
                throw .retry(
                    "the device does not list the uploaded \(parts.count > 1 ? name(missing) : "image") yet; uploading again", counts: !uploadSkipped)
            }
            return (true, "")
        }

        mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) { note(retry.reason) }

        mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError {
            let missing = parts.first { $0.reading.staged == nil } ?? parts[lead]
            return oldImageFailure(
                .verificationFailed, step: .verify,
                "the device does not list the uploaded \(parts.count > 1 ? name(missing) : "image") (hash \(missing.hash.hexString.prefix(16))…) in its secondary slot: it did not verify there"
            )
        }

        /// Marks each image (test, or permanent for ``FlashMode/confirm`` and for an image whose core
        /// cannot be read, which MCUboot only copies over), the highest image number first, and
        /// resets once. Again, after a report that the image is held: the marks that did not take,
        /// then the reset.
        mutating func activate() async throws(TransferError) -> Bool {
            activations += 1
            let pending = parts.allSatisfy { $0.reading.staged?.pending == true }
            if activations > 1 {
                note(
                    pending
                        ? "the image\(parts.count > 1 ? "s are" : " is") still pending (the reset did not arrive); resetting again"
                        : "the image\(parts.count > 1 ? "s are" : " is") not marked pending (the request did not arrive); marking \(parts.count > 1 ? "them" : "it") again")
            }
            afterProbe = false
            for index in parts.indices.sorted(by: { parts[$0].number > parts[$1].number }) where marks {
                let part = parts[index]
                guard activations == 1 || part.reading.staged?.pending != true else { continue }
                let permanent = mode == .confirm || !part.reading.primaryReadable
                do {
                    take(try await connection!.setImageState(hash: part.hash, confirm: permanent, timeout: timeouts.response, attempts: host.patience))
                } catch { throw host.fail(.activate, error) }
                guard parts[index].reading.marked else {
                    throw TransferError(.deviceRefused, step: .activate, "the device did not mark \(parts.count > 1 ? name(part) : "the image") pending")
                }
            }
            try await host.sendReset(connection!)
            await connection?.close()
            connection = nil
            fresh = false
            return true
        }

        /// Not asked: ``reportRunning()`` answers for the slots.
        func runningVersion() async throws(TransferError) -> String? { reading.running?.version }

        /// The slots once the device is back: each image runs (confirmed now if the mode asks), is
        /// still pending (the engine resets again), or is gone, which MCUboot explains, naming the
        /// image and what image 0 runs.
        mutating func reportRunning() async throws(TransferError) -> UpdateStateMachine.DeviceReport? {
            if !fresh { try await read(.reconnect) }
            fresh = false
            // The other images first: the lead's report is what the engine acts on.
            for index in parts.indices where index != lead {
                while true {
                    switch parts[index].reading.afterReset {
                    case .runs, .copied: break
                    case .stillPending:
                        var report = reading.report(mode) ?? UpdateStateMachine.DeviceReport(mode: .application, version: versionBefore ?? "", target: .held)
                        report.target = .held
                        report.detail = "\(name(parts[index])) is still pending after \(activations) resets: the device does not start it"
                        return report
                    case .elsewhere:
                        guard rereads < Self.maximumRereads else {
                            // Named with what the lead runs, which is the outcome; left unconfirmed (it reverts
                            // at the next reset) rather than kept beside a core that did not take its update.
                            var error = parts[index].reading.failure(version: parts[index].version)
                            let lead = reading.running
                            error.message =
                                "image \(reading.image) runs \(reading.active?.version ?? "nothing")\(lead.map { $0.confirmed ? "" : " unconfirmed (so it reverts at the next reset)" } ?? "") but "
                                + error.message
                            error.outcome = lead.map { $0.confirmed ? .newImageConfirmed : .newImageUnconfirmed } ?? .oldImage(reading.active?.version ?? "nothing")
                            throw error
                        }
                        rereads += 1
                        try await read(.reconnect)
                        continue
                    }
                    break
                }
            }
            while true {
                switch reading.afterReset {
                case .copied:
                    note("\(name(parts[lead])) left its slot at the reset: MCUboot copied it to its core (which the device cannot read back)")
                    leadCopied = true
                    return UpdateStateMachine.DeviceReport(mode: .application, version: version, target: .running(confirmationOwed: false))
                case .runs(let running):
                    guard reading.confirmationOwed(mode, by: running) else { return reading.report(mode) }
                    if afterProbe { note("the device runs \(version) unconfirmed; confirming again") }
                    afterProbe = false
                    do {
                        take(try await connection!.setImageState(hash: nil, confirm: true, timeout: timeouts.response, attempts: host.patience))
                    } catch { throw host.fail(.confirm, error) }
                    guard let now = reading.running, now.confirmed else {
                        throw TransferError(.confirmFailed, step: .confirm, "the device did not mark the running image confirmed")
                    }
                    return reading.report(mode)
                case .stillPending:
                    var report = reading.report(mode)
                    report?.detail = "the image is still pending after \(activations) resets: the device does not start it"
                    return report
                case .elsewhere:
                    guard rereads < Self.maximumRereads else {
                        var error = reading.failure(version: version)
                        if reading.staged == nil, let encryption = (try? MCUbootImage(decoding: parts[lead].image))?.encryption {
                            error.message +=
                                "; the image is encrypted (\(encryption.cipher)\(encryption.key.map { String(format: ", its key in TLV 0x%02x", $0.type) } ?? "")): the bootloader must hold the private key it was encrypted for"
                        }
                        if reading.staged != nil, let dependencies = try? MCUbootImage(decoding: parts[lead].image).dependencies, !dependencies.isEmpty {
                            error.message +=
                                "; or the image's dependency (\(dependencies.map(\.description).joined(separator: ", "))) was not met, which bleota could not check beforehand"
                        }
                        throw error
                    }
                    rereads += 1
                    try await read(.reconnect)
                }
            }
        }

        /// Reconnects within the reboot budget and reads the slots; the connection stays open
        /// for whatever step the report leads to.
        mutating func probe(after error: TransferError) async -> UpdateStateMachine.DeviceReport? {
            await connection?.close()
            connection = nil
            guard let found = await host.probe() else { return nil }
            connection = found.connection
            take(found.slots)
            fresh = true
            afterProbe = true
            let report = reading.report(mode)
            if case .running(confirmationOwed: false)? = report?.target {
                note("the device runs \(version) despite the error (\(error.message))")
            }
            return report
        }

        mutating func finish() async -> UpdateReport {
            await connection?.close()
            recorder.versionBefore = versionBefore
            recorder.versionAfter = reading.active?.version ?? (leadCopied ? version : versionBefore)
            return host.report(&recorder, result, bytes: totalBytes)
        }

        mutating func abandon(_ error: TransferError) async {
            await connection?.close()
        }
    }

    /// Two uploads of one try (several images) as one: everything summed.
    func accumulate(_ total: UploadResult, _ more: UploadResult) -> UploadResult {
        var summed = more
        summed.bytes += total.bytes
        summed.elapsed += total.elapsed
        summed.requests += total.requests
        summed.resentBytes += total.resentBytes
        summed.resentRequests += total.resentRequests
        summed.reconnects += total.reconnects
        summed.lossEvents += total.lossEvents
        return summed
    }

    func merge(_ total: UploadResult, _ more: UploadResult) -> UploadResult {
        var merged = more
        merged.elapsed += total.elapsed
        merged.requests += total.requests
        merged.resentBytes += total.resentBytes + (total.requests > 0 ? total.bytes : 0)
        // An upload started again sends every request of the one before again.
        merged.resentRequests += total.requests
        merged.reconnects += total.reconnects
        merged.lossEvents += total.lossEvents
        return merged
    }

    /// Sends the reset, then waits for evidence that it happened before anything reads the slots.
    /// A device need not reset at its answer: Zephyr's `os_mgmt` answers, then resets
    /// `CONFIG_MCUMGR_GRP_OS_RESET_MS` later (250 ms by default), and until then the old image
    /// answers every request with its old slots — a reading taken then says "still pending" of an
    /// update that is about to take. A lost answer or a link that drops is expected either way.
    func sendReset(_ connection: SMPConnection, bootMode: Int? = nil, step: UpdateStep = .activate) async throws(TransferError) {
        do {
            try await connection.reset(timeout: timeouts.response, attempts: 2, bootMode: bootMode)
        } catch .linkLost {
            logger.debug("the link dropped at the reset: the device is resetting")
            return
        } catch .timeout {
            logger.debug("no answer to the reset: the device may be resetting")
        } catch {
            throw fail(step, error)
        }
        let evidence = await awaitReset(connection)
        logger.debug("after the reset: \(evidence)")
    }

    /// What showed that a reset happened (``awaitReset(_:)``).
    enum ResetEvidence: Sendable, Equatable, CustomStringConvertible {
        /// The link dropped (over BLE, the device's reset ends the connection).
        case linkDropped
        /// The device stopped answering (over UDP or serial nothing drops: it goes quiet).
        case wentQuiet(after: Duration)
        /// It kept answering for ``SMPUpdater/resetEvidenceLimit``: the reset was lost or refused,
        /// and what the slots say now is the verdict (the engine resets again if it is pending).
        case stillAnswering

        var description: String {
            switch self {
            case .linkDropped: "the link dropped"
            case .wentQuiet(let after): "the device went quiet \(after) after the reset's answer"
            case .stillAnswering: "the device kept answering for \(SMPUpdater.resetEvidenceLimit): the reset did not happen"
            }
        }
    }

    /// How long a device may go on answering after a reset before bleota takes it that the reset
    /// did not happen: twelve times Zephyr's default delay (`CONFIG_MCUMGR_GRP_OS_RESET_MS`, 250 ms).
    static let resetEvidenceLimit = Duration.seconds(3)

    /// Echoes until the device stops answering or the link drops, within ``resetEvidenceLimit``.
    func awaitReset(_ connection: SMPConnection) async -> ResetEvidence {
        let began = clock.now
        while clock.now - began < Self.resetEvidenceLimit {
            do {
                _ = try await connection.echo("reset?", timeout: timeouts.response, attempts: 1)
            } catch .linkLost {
                return .linkDropped
            } catch .timeout {
                return .wentQuiet(after: clock.now - began)
            } catch {
                // Any other answer is an answer: the old image is still there.
            }
            do { try await clock.sleep(for: .milliseconds(50)) } catch { return .stillAnswering }
        }
        return .stillAnswering
    }

    /// After a reset: the device found again within the reboot budget (``/BleotaEngine/HostContext/reconnect(after:expecting:timeout:advertisedName:step:greeting:)``),
    /// greeted with an echo, which a device still swapping its images does not answer yet.
    func waitForReturn(for purpose: ConnectPurpose = .application, advertisedName: String? = nil) async throws(TransferError) -> SMPConnection {
        let clock = self.clock, timeouts = self.timeouts
        return try await context.reconnect(
            after: nil, expecting: purpose == .bootloader ? .bootloader : .application, advertisedName: advertisedName, step: .reconnect
        ) { (link) async throws(TransferError) -> SMPConnection in
            let connection = SMPConnection(link: link, clock: clock, firstSequence: 0x80)
            do { _ = try await connection.echo("bleota", timeout: timeouts.response) } catch {
                throw TransferError(.timeout, step: .reconnect, "the device took a connection but did not answer an echo: \(error)")
            }
            return connection
        }.greeting
    }

    /// Reconnects within the reboot budget and reads the slots; nil when the device cannot be reached.
    /// The connection stays open for whatever step the probe leads to.
    func probe() async -> (slots: [SMPImageSlot], connection: SMPConnection)? {
        do {
            let connection = try await waitForReturn()
            do {
                return (try await connection.imageState(timeout: timeouts.response, attempts: patience), connection)
            } catch {
                await connection.close()
                return nil
            }
        } catch {
            return nil
        }
    }

    func report(_ recorder: inout OperationRecorder, _ result: UploadResult, bytes: Int) -> UpdateReport {
        var statistics = TransferStatistics()
        statistics.packetsSent = result.requests
        statistics.reconnects = result.reconnects
        statistics.packetsLost = result.lossEvents
        statistics.packetsResent = result.resentRequests
        statistics.bytesOnWire = result.requests > 0 ? bytes + result.resentBytes : 0
        var tuning = TransferTuning()
        tuning.window = result.window
        tuning.packetSize = result.chunkSize
        let transfer = TransferSummary(streamBytes: bytes, packetSize: result.chunkSize, elapsed: result.elapsed)
        return recorder.finish(bytes: bytes, transfer: transfer, statistics: statistics, tuning: tuning)
    }

    // MARK: Test transfers (tune)

    /// A test transfer is an upload of `image`'s lead image (image 0, or the only one) to its secondary
    /// slot with this host's tuning, never marked: what `tune` measures, the device keeping its image.
    /// Sent whole every time, even when the slot holds it already (an upload-only flash would skip it).
    package func testTransfer(image: PreparedImage) async throws(TransferError) -> UpdateReport {
        let part = image.parts.first { ($0.attributes[SMPProtocol.imageNumberAttribute] ?? 0) == 0 } ?? image.parts[0]
        var recorder = context.recorder("tune")
        recorder.beginQuietly(.connect)
        var connection = try await connect(.initial, step: .connect)
        let parameters: MCUmgrParameters
        do {
            let first = Self.firstContact(connect: timeouts.connect, response: timeouts.response, patience: patience)
            parameters = try await connection.parameters(timeout: first.timeout, attempts: first.attempts)
        } catch {
            await connection.close()
            throw fail(.connect, error)
        }
        try await recorder.enterTransfer(closing: connection.link)
        let result: UploadResult
        do {
            (result, connection) = try await upload(
                part.data, sha: SHA256Digest.hash(part.data), connection: connection, parameters: parameters,
                imageNumber: part.attributes[SMPProtocol.imageNumberAttribute] ?? 0)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
        return report(&recorder, result, bytes: part.data.count)
    }

    package func testTransfer(_ bytes: [UInt8]) async throws(TransferError) -> UpdateReport {
        throw TransferError(
            .badInput, step: .load, "an MCUmgr device takes only MCUboot images: give tune the image to measure with, --image FILE (it is uploaded but never marked)")
    }

    // MARK: Device management

    package func imageState(_ change: ImageStateChange?) async throws(TransferError) -> DeviceImageState {
        try await session(.connect) { connection throws(SMPClientError) in
            let slots: [SMPImageSlot]
            switch change {
            case .test(let hash)?: slots = try await connection.setImageState(hash: hash, confirm: false, timeout: timeouts.response)
            case .confirm(let hash)?: slots = try await connection.setImageState(hash: hash, confirm: true, timeout: timeouts.response)
            case nil: slots = try await connection.imageState(timeout: timeouts.response)
            }
            // Not every device answers bootloader info; the slots are what was asked for.
            let info = try? await connection.bootloaderInfo(timeout: timeouts.response)
            let bootloader = info.map { $0.name + ($0.mode.map { " (\(SMPBootloaderInfo.modeName($0)))" } ?? "") }
            return DeviceImageState(slots: slots, bootloader: bootloader)
        }
    }

    package func echo(_ text: String) async throws(TransferError) -> String {
        try await session(.connect) { connection throws(SMPClientError) in try await connection.echo(text, timeout: timeouts.response) }
    }

    /// Resets the device and returns once the reset has happened (``awaitReset(_:)``), so that
    /// what is asked next is asked of the device after it.
    package func reset() async throws(TransferError) {
        let connection = try await connect(.initial, step: .connect)
        do {
            try await connection.reset(timeout: timeouts.response, attempts: 2)
        } catch .linkLost {
            await connection.close()
            return
        } catch {
            await connection.close()
            throw fail(.activate, error)
        }
        _ = await awaitReset(connection)
        await connection.close()
    }

    package func eraseStaging() async throws(TransferError) {
        try await session(.connect) { connection throws(SMPClientError) in try await connection.eraseSecondarySlot(timeout: timeouts.response) }
    }

    /// One connection for one management exchange, closed however it ends.
    func session<T: Sendable>(_ step: UpdateStep, _ body: (SMPConnection) async throws(SMPClientError) -> T) async throws(TransferError) -> T {
        let connection = try await connect(.initial, step: .connect)
        do {
            let value = try await body(connection)
            await connection.close()
            return value
        } catch {
            await connection.close()
            throw fail(step, error)
        }
    }
}
