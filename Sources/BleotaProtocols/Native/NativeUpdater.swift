import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaZlib
import Logging

/// The host half of bleota's native protocol: `flash`, `push`, `pull` and test transfers.
///
/// A thin shell around ``/BleotaEngine/UpdateStateMachine`` and ``/BleotaEngine/TransferEngine``: a flash is
/// the engine's lifecycle (``/BleotaEngine/UpdateStateMachine/run(_:)``) performing this protocol's steps,
/// and a transfer reconnects and resumes when a link drops mid-transfer. Every knob of
/// ``/BleotaEngine/TransferTuning`` means what its documentation says.
package struct NativeUpdater: ContextHost {
    package var context: HostContext
    package var tuning: TransferTuning { context.tuning }

    package init(context: HostContext) { self.context = context }

    /// Links whose packets carry at most this many bytes get compact data
    /// headers when the device takes them: on a 20-byte ATT payload the full
    /// header costs a quarter of every packet, on a 244-byte one 2 %, not worth
    /// giving up the per-packet CRC for.
    package static let compactDataLinkPayload = 64

    package init(
        connector: any DeviceConnector, clock: any BleotaClock, tuning: TransferTuning = TransferTuning(),
        timeouts: StepTimeouts = StepTimeouts(), logger: Logger = Logger(label: "bleota.native"),
        onEvent: @escaping @Sendable (UpdateEvent) -> Void = { _ in }
    ) {
        self.init(
            context: HostContext(
                protocolName: NativeProtocol.name, connector: connector, clock: clock, tuning: tuning,
                timeouts: timeouts, logger: logger, onEvent: onEvent))
    }

    package func flash(_ image: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        if let part = image.parts.first, let streamed = part.streamed {
            return try await flash(
                source: streamed.file, digests: (streamed.crc32, streamed.sha256), version: image.version, deltaBase: image.deltaBase, cohort: image)
        }
        return try await flash(source: image.bytes, digests: nil, version: image.version, deltaBase: image.deltaBase, cohort: image)
    }

    /// A test transfer of a prepared image; one streamed from its file (16 MiB and more) is refused,
    /// as each trial would take as long as flashing it.
    package func testTransfer(image: PreparedImage) async throws(TransferError) -> UpdateReport {
        if let part = image.parts.first, part.streamed != nil {
            throw TransferError(
                .badInput, step: .load,
                "the image is \(part.count) bytes; tuning trials send it whole each time: tune with a smaller image or without --image")
        }
        return try await testTransfer(image.bytes)
    }

    package func push(_ file: [UInt8], name: String) async throws(TransferError) -> UpdateReport {
        try await push(file: file, name: name)
    }

    package func pull(_ name: String) async throws(TransferError) -> PulledFile {
        let (file, report) = try await pull(name: name)
        return PulledFile(bytes: file, report: report)
    }

    // MARK: - Flash

    /// Updates the device's firmware to `image`, which it must then report as `version`.
    package func flash(image: [UInt8], version: String) async throws(TransferError) -> UpdateReport {
        try await flash(source: image, digests: nil, version: version)
    }

    /// Updates the device's firmware to the bytes of `source` (read as they are sent;
    /// `digests`, its CRC-32 and SHA-256 when already known), which it must then report as `version`.
    package func flash(
        source image: any ByteSource, digests: (crc32: UInt32, sha256: [UInt8])?, version: String, deltaBase: DeltaBase? = nil,
        cohort: PreparedImage? = nil
    )
        async throws(TransferError) -> UpdateReport
    {
        try tuning.validate()
        var machine = UpdateStateMachine(expectedVersion: version)
        var session = Session(updater: self, operation: "flash")
        session.deltaBase = deltaBase
        session.cohort = cohort
        var steps = FlashSteps(session: session, image: image, digests: digests, version: version)
        return try await machine.run(&steps)
    }

    /// A firmware update's steps as the native protocol performs them, for the engine's lifecycle.
    struct FlashSteps: UpdateLifecycleSteps {
        var session: Session
        let image: any ByteSource
        let digests: (crc32: UInt32, sha256: [UInt8])?
        let version: String
        var link: (any Link)?
        var versionBefore: String?
        var transferResult: TransferResult?
        /// One: the transfer engine resends what was lost and resumes after a drop itself.
        var tries = UpdateTries(limit: 1)

        init(session: Session, image: any ByteSource, digests: (crc32: UInt32, sha256: [UInt8])?, version: String) {
            self.session = session
            self.image = image
            self.digests = digests
            self.version = version
        }

        var timeouts: StepTimeouts { session.updater.timeouts }

        mutating func entering(_ step: UpdateStep, for action: UpdateStateMachine.Action) async throws(TransferError) {
            if case .transfer = action { try await session.enterTransfer(closing: link) } else { session.enter(step) }
        }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            let (newLink, hello) = try await session.connect(.initial, step: .connect)
            link = newLink
            versionBefore = hello.firmwareVersion
            // A device waiting in its bootloader is finishing an update, whatever it ran before.
            if hello.mode == .application, let refusal = session.cohort?.otherVersionRefusal(running: hello.firmwareVersion) {
                throw refusal
            }
            try session.checkFits(image.count, hello: hello, step: .connect)
            // Every option is checked against what the device announced before it is sent
            // to its bootloader: a refusal after the switch would leave it there.
            _ = try session.packetSize(link: newLink, hello: hello, step: .connect)
            try session.checkCompression(hello, step: .connect)
            try session.checkDelta(hello, step: .connect)
            return hello.mode == .bootloader ? .bootloader : .application
        }

        mutating func enterBootloader() async throws(TransferError) -> Bool {
            // A device may reset before its answer gets out; the reconnect step
            // then finds out whether it reached its bootloader.
            if link == nil { (link, _) = try await session.connect(.initial, step: .enterBootloader) }
            let answered = try await session.requestAllowingReset(.enterBootloader, on: link!, step: .enterBootloader)
            await link?.close()
            link = nil
            return answered
        }

        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
            let step: UpdateStep = mode == .bootloader ? .reconnect : .confirm
            let greeter = session
            let (newLink, hello) = try await session.updater.context.reconnect(after: nil, expecting: mode, step: step) {
                (link) async throws(TransferError) -> NativeMessage.HelloResponse in
                try await greeter.request(NativeHelloRequest(), on: link, step: step)
            }
            link = newLink
            if mode == .bootloader { try session.checkFits(image.count, hello: hello, step: .reconnect) }
            session.lastHello = hello
            return hello.mode == .bootloader ? .bootloader : .application
        }

        mutating func transfer() async throws(TryFailure) {
            do throws(TransferError) {
                transferResult = try await session.transfer(stream: image, digests: digests, target: .firmware, label: version, link: &link)
            } catch { throw .final(error) }
        }

        mutating func verify() async throws(TryFailure) -> (ok: Bool, detail: String) {
            do throws(TransferError) {
                let result = try await session.verifyResendingIfCompact(
                    stream: image, digests: digests, target: .firmware,
                    label: version, link: &link, result: &transferResult)
                return (result.ok, result.detail)
            } catch { throw .final(error) }
        }

        mutating func activate() async throws(TransferError) -> Bool {
            let answered = try await session.requestAllowingReset(.activate, on: link!, step: .activate)
            await link?.close()
            link = nil
            return answered
        }

        mutating func runningVersion() async throws(TransferError) -> String? {
            session.lastHello?.firmwareVersion ?? ""
        }

        mutating func probe() async -> UpdateStateMachine.DeviceReport? {
            await link?.close()
            link = nil
            return await session.probe()
        }

        mutating func finish() async -> UpdateReport {
            session.recorder.versionBefore = versionBefore
            session.recorder.versionAfter = session.lastHello?.firmwareVersion
            let report = session.report(bytes: image.count, transfer: transferResult)
            await link?.close()
            return report
        }

        mutating func abandon(_ error: TransferError) async {
            await link?.close()
        }
    }

    // MARK: - Test transfers

    /// Sends `bytes` as a test transfer (target 2): the device checks every
    /// packet and the whole stream's hash, then discards it. Firmware and files
    /// are untouched, so `bleota tune` can try settings on a device in use.
    package func testTransfer(_ bytes: [UInt8]) async throws(TransferError) -> UpdateReport {
        try await sendVerified(bytes, target: .test, label: "tune", operation: "test") { hello, _ throws(TransferError) in
            guard hello.capabilities.contains(.testTransfer) else {
                throw TransferError(.deviceRefused, step: .connect, "\(connector.description) does not accept test transfers, so it cannot be tuned without changing its firmware")
            }
        } unverified: {
            "the device could not verify the test transfer (\($0))"
        }
    }

    // MARK: - Files

    /// Stores `file` on the device under `name`; it is kept only if it verifies.
    package func push(file: [UInt8], name: String) async throws(TransferError) -> UpdateReport {
        try await sendVerified(file, target: .file, label: name, operation: "push") { hello, session throws(TransferError) in
            guard hello.capabilities.contains(.files) else {
                throw TransferError(.deviceRefused, step: .connect, "\(connector.description) has no file store")
            }
            try session.checkFits(file.count, hello: hello, step: .connect)
        } unverified: {
            "the device could not verify '\(name)' (\($0)); it was not stored"
        }
    }

    /// connect → (admit) → transfer → verify, for the operations that send a
    /// stream and need nothing after the device's verdict (push, test transfers).
    private func sendVerified(
        _ bytes: [UInt8], target: NativeMessage.Target, label: String, operation: String,
        admit: (NativeMessage.HelloResponse, Session) throws(TransferError) -> Void,
        unverified: (String) -> String
    ) async throws(TransferError) -> UpdateReport {
        try tuning.validate()
        var session = Session(updater: self, operation: operation)
        session.enter(.connect)
        let (connected, hello) = try await session.connect(.initial, step: .connect)
        var link: (any Link)? = connected
        do throws(TransferError) {
            try admit(hello, session)
            try await session.recorder.enterTransfer()  // the catch below closes the link
            var result: TransferResult? = try await session.transfer(stream: bytes, target: target, label: label, link: &link)
            session.enter(.verify)
            let verdict = try await session.verifyResendingIfCompact(stream: bytes, target: target, label: label, link: &link, result: &result)
            guard verdict.ok else { throw TransferError(.verificationFailed, step: .verify, unverified(verdict.detail)) }
            await link?.close()
            return session.report(bytes: bytes.count, transfer: result)
        } catch {
            await link?.close()
            throw error
        }
    }

    /// Fetches file `name` from the device and checks it against the device's
    /// SHA-256 before returning it; the caller writes it atomically.
    package func pull(name: String) async throws(TransferError) -> (file: [UInt8], report: UpdateReport) {
        try tuning.validate()
        var session = Session(updater: self, operation: "pull")
        session.enter(.connect)
        let (link, hello) = try await session.connect(.initial, step: .connect)
        do throws(TransferError) {
            let result = try await pullBody(name: name, link: link, hello: hello, session: &session)
            await link.close()
            return result
        } catch {
            await link.close()
            throw error
        }
    }

    private func pullBody(
        name: String, link: any Link, hello: NativeMessage.HelloResponse, session: inout Session
    )
        async throws(TransferError) -> (file: [UInt8], report: UpdateReport)
    {
        guard hello.capabilities.contains(.files) else {
            throw TransferError(.deviceRefused, step: .connect, "\(connector.description) has no file store")
        }
        let packetSize = try session.packetSize(link: link, hello: hello)
        try await session.recorder.enterTransfer()  // pull(name:) closes the link
        let request = NativeMessage.GetFile(
            name: name, packetSize: UInt16(packetSize),
            ackInterval: UInt16(tuning.effectiveAckInterval), window: UInt16(tuning.window))
        let info = try await session.request(NativeGetFileRequest(file: request), on: link, step: .transfer)
        guard info.status == .ok else {
            throw TransferError(
                .deviceRefused, step: .transfer,
                info.status == .notFound
                    ? "the device has no file named '\(name)': check the name" : "the device refused to send '\(name)': \(info.status)")
        }
        let started = clock.now
        let file = try await session.receive(size: Int(info.size), packetSize: packetSize, on: link)
        let elapsed = clock.now - started
        session.enter(.verify)
        guard CRC32.checksum(file) == info.crc32, SHA256Digest.hash(file) == info.sha256 else {
            throw TransferError(.verificationFailed, step: .verify, "'\(name)' arrived but its hash does not match the device's: nothing was written")
        }
        let result = TransferSummary(streamBytes: file.count, compressed: false, packetSize: packetSize, elapsed: elapsed)
        return (file, session.report(bytes: file.count, transfer: result))
    }
}

typealias TransferResult = TransferSummary

/// One operation's mutable bookkeeping: the shared step recorder, statistics, the last HELLO.
struct Session {
    let updater: NativeUpdater
    var recorder: OperationRecorder
    var statistics = TransferStatistics()
    var lastHello: NativeMessage.HelloResponse?
    /// Whether the last transfer went with compact data headers.
    var lastTransferCompact = false
    /// Set after a compact transfer failed VERIFY: every later transfer carries a CRC per packet.
    var fullHeadersOnly = false
    /// The image the device is believed to run, when a delta patch may be sent instead of the image.
    var deltaBase: DeltaBase?
    /// The image being flashed, for its ``PreparedImage/fromVersions``: checked against the
    /// version the device's hello reports, before anything is sent.
    var cohort: PreparedImage?

    init(updater: NativeUpdater, operation: String) {
        self.updater = updater
        recorder = updater.context.recorder(operation)
    }

    mutating func enter(_ step: UpdateStep) { recorder.enter(step) }
    /// The transfer step, once the fleet's transfer gate (if any) gives this device its place.
    /// A withdrawn wait closes `link` (see ``OperationRecorder/enterTransfer(closing:)``).
    mutating func enterTransfer(closing link: (any Link)?) async throws(TransferError) { try await recorder.enterTransfer(closing: link) }

    mutating func report(bytes: Int, transfer: TransferSummary?) -> UpdateReport {
        var tuning = updater.tuning
        tuning.packetSize = transfer?.packetSize
        return recorder.finish(bytes: bytes, transfer: transfer, statistics: statistics, tuning: tuning)
    }

    /// Connects and says HELLO; returns the link and what the device said.
    mutating func connect(
        _ purpose: ConnectPurpose, step: UpdateStep, timeout: Duration? = nil
    )
        async throws(TransferError) -> (any Link, NativeMessage.HelloResponse)
    {
        let link: any Link
        do {
            link = try await updater.connector.connect(for: purpose, timeout: timeout ?? updater.timeouts.connect)
        } catch {
            throw TransferError(.linkLost, step: step, "cannot connect to \(updater.connector.description): \(error)")
        }
        let hello: NativeMessage.HelloResponse
        do throws(TransferError) {
            hello = try await request(NativeHelloRequest(), on: link, step: step)
        } catch {
            // A device that connected but never answered stays connected otherwise, and a
            // connected peripheral does not advertise: the next try would not find it.
            await link.close()
            throw error
        }
        lastHello = hello
        return (link, hello)
    }

    func checkFits(_ size: Int, hello: NativeMessage.HelloResponse, step: UpdateStep) throws(TransferError) {
        guard size <= Int(hello.slotSize) else {
            var error = TransferError(
                .deviceRefused, step: step,
                "the image is \(size) bytes but the device's slot holds \(hello.slotSize): nothing was sent; build a smaller image")
            // Nothing was sent: the device runs what it said at hello, which --json's deviceState says.
            error.outcome = .oldImage(hello.firmwareVersion)
            throw error
        }
    }

    /// `--delta always` needs a device that applies patches and runs the base: refused at the first
    /// connection, before the device is sent to its bootloader or any byte of the image goes.
    func checkDelta(_ hello: NativeMessage.HelloResponse, step: UpdateStep) throws(TransferError) {
        guard let base = deltaBase, base.policy == .always else { return }
        guard hello.capabilities.contains(.delta), let running = hello.runningSHA256 else {
            var error = TransferError(.deviceRefused, step: step, "the device does not apply delta patches: use --delta auto or never")
            error.outcome = .oldImage(hello.firmwareVersion)
            throw error
        }
        if case .failure(let mismatch) = base.resolve(running: running) {
            // No stored copy is a local cause (exit 3, as a missing file); a given base the device
            // does not run is the device's answer (exit 4).
            let code: TransferError.Code
            if case .store = base.origin { code = .badInput } else { code = .deviceRefused }
            var error = TransferError(code, step: step, "\(mismatch): give --base the image it runs, or use --delta auto")
            // Nothing was sent: the device runs what it said at hello.
            error.outcome = .oldImage(hello.firmwareVersion)
            throw error
        }
    }

    /// The patch to send instead of `image`, when `deltaBase` allows one and it is worth it; says why not.
    func deltaPatch(for image: any ByteSource, hello: NativeMessage.HelloResponse) throws(TransferError) -> (patch: [UInt8], base: [UInt8])? {
        guard let base = deltaBase, base.policy != .never else { return nil }
        // Why the whole image goes: a note when the user gave the base, at info level when it is
        // the store of flashed images (which lacking the image is the usual case for a device
        // bleota has not flashed before, and not worth a line on every flash).
        func whole(_ why: String) -> (patch: [UInt8], base: [UInt8])? {
            if case .image = base.origin {
                updater.onEvent(.note("sending the whole image: \(why)"))
            } else {
                updater.logger.info("sending the whole image: \(why)")
            }
            return nil
        }
        guard hello.capabilities.contains(.delta), let running = hello.runningSHA256 else {
            return whole("the device does not apply delta patches")
        }
        let found: (bytes: [UInt8], source: String)
        switch base.resolve(running: running) {
        case .success(let resolved): found = resolved
        case .failure(let mismatch): return whole(mismatch.description)
        }
        guard let bytes = image as? [UInt8] else { return whole("an image sent from its file is not diffed") }
        let patch = DeltaPatch.create(from: found.bytes, to: bytes)
        guard base.policy == .always || patch.count * 10 < bytes.count * 9 else {
            return whole("a patch of \(patch.count) bytes would save under 10 % of \(bytes.count)")
        }
        updater.onEvent(
            .note(
                String(
                    format: "sending a delta patch: %d bytes for the %d-byte image (%.1f %%), against %@", patch.count, bytes.count,
                    100 * Double(patch.count) / Double(max(1, bytes.count)), found.source)))
        return (patch, running)
    }

    /// `--compression on` needs a device that inflates.
    func checkCompression(_ hello: NativeMessage.HelloResponse, step: UpdateStep) throws(TransferError) {
        guard updater.tuning.compression == .on, !hello.capabilities.contains(.deflate) else { return }
        throw TransferError(.deviceRefused, step: step, "the device does not accept compressed transfers: use --compression off")
    }

    /// Whether a transfer on `link` goes with compact data headers: the device takes them, the packets
    /// (as the link and the device allow) are small enough for the header to matter, and no compact
    /// transfer has failed VERIFY. The device's limit counts: over UDP to a device behind a 23-byte
    /// ATT MTU (`sim serve --link 1m-no-dle-30ms`) the link allows 1 472 bytes, the device 20.
    func sendsCompactData(on link: any Link, hello: NativeMessage.HelloResponse) -> Bool {
        !fullHeadersOnly && hello.capabilities.contains(.compactData) && Self.largestPacket(on: link, hello: hello) <= NativeUpdater.compactDataLinkPayload
    }

    /// The largest packet that reaches the device: what the link carries, within the device's maxPacket.
    static func largestPacket(on link: any Link, hello: NativeMessage.HelloResponse) -> Int {
        min(link.parameters.maximumPayload, Int(hello.maximumPacket))
    }

    /// The payload per data packet: the tuning's if it fits, else the most the link and device allow.
    ///
    /// A size counts payload bytes, and a compact header leaves more of a packet for them. A size that
    /// fits only with compact headers (what `tune` measures on such a link) is taken wherever the device
    /// takes compact headers, and sent with as many payload bytes as a full header leaves when a
    /// transfer goes without them (a pull, or a resend after a failed VERIFY): the same packets on the
    /// air, so a saved tuning never fails a transfer that a default one would finish.
    func packetSize(link: any Link, hello: NativeMessage.HelloResponse, step: UpdateStep = .transfer, compact: Bool = false) throws(TransferError) -> Int {
        let onTheAir = Self.largestPacket(on: link, hello: hello)
        let header = compact ? NativeMessage.CompactData.headerSize : NativeMessage.dataHeaderSize
        let maximum = onTheAir - header
        guard maximum >= 1 else {
            throw TransferError(.deviceRefused, step: step, "the link carries only \(link.parameters.maximumPayload) bytes per packet, too few for data")
        }
        // By default the packets the link carries in the fewest pieces (whole link-layer fragments);
        // a tuning may ask for anything up to the largest.
        guard let wanted = updater.tuning.packetSize else { return min(link.parameters.preferredPayload, onTheAir) - header }
        let takesCompact = hello.capabilities.contains(.compactData) && onTheAir <= NativeUpdater.compactDataLinkPayload
        let accepted = takesCompact ? max(maximum, onTheAir - NativeMessage.CompactData.headerSize) : maximum
        guard wanted >= 1 && wanted <= accepted else {
            throw TransferError(
                .invalidTuning, step: step,
                "packet size \(wanted) is out of range for this link and device: use 1…\(accepted)")
        }
        return min(wanted, maximum)
    }

    /// Sends `request` and waits for the reply that answers it, skipping stray transfer traffic,
    /// within the command line's policy (`timeout` instead of its wait per try); an ERROR reply is
    /// the device's refusal.
    @discardableResult
    func request<Request: NativeRequest>(
        _ request: Request, on link: any Link, step: UpdateStep, timeout: Duration? = nil
    ) async throws(TransferError) -> Request.Response {
        let message = request.message
        let policy = RequestPolicy(updater.timeouts).waiting(timeout ?? updater.timeouts.response)
        return try await updater.context.exchange(request.what, step: step, policy: policy) { () async throws(LinkError) in
            try await NativeFraming.send(message, on: link)
        } answer: {
            var reassembler = NativeReassembler()
            while true {
                guard let packet = reassembler.feed(try await link.receive()), let reply = try? NativeMessage(decoding: packet) else { continue }
                if case .error(let error) = reply { throw DeviceRefusal("the device refused: \(error.message) (\(error.status))") }
                if let answer = request.response(from: reply) { return answer }
            }
        }
    }

    /// Sends a request after which the device resets (ENTER_BOOTLOADER,
    /// ACTIVATE); returns whether its answer came. A refusal is an error; a link
    /// that drops, or an answer that never comes, is not — the reset may have
    /// beaten the answer to the air, or the request may never have arrived, and
    /// the reconnect that follows finds out which.
    func requestAllowingReset(_ message: NativeMessage, on link: any Link, step: UpdateStep) async throws(TransferError) -> Bool {
        guard let opcode = message.opcode else { return false }
        do throws(TransferError) {
            let status = try await request(NativeSimpleRequest(message: message), on: link, step: step)
            guard status == .ok else {
                throw TransferError(.deviceRefused, step: step, "the device refused \(opcode.name): \(status)")
            }
            return true
        } catch  where error.code == .linkLost || error.code == .timeout {
            updater.logger.debug("no answer to \(step) (\(error.message)); the reconnect will tell whether it arrived")
            return false
        }
    }

    /// After a late failure: reconnect within the reboot budget and ask what the device runs.
    mutating func probe() async -> UpdateStateMachine.DeviceReport? {
        guard let (link, hello) = try? await connect(.application, step: .confirm, timeout: updater.timeouts.reboot) else { return nil }
        await link.close()
        lastHello = hello
        return UpdateStateMachine.DeviceReport(mode: hello.mode == .bootloader ? .bootloader : .application, version: hello.firmwareVersion)
    }

    /// Runs START and the engine, reconnecting and resuming after disconnects.
    mutating func transfer(
        stream image: any ByteSource, digests known: (crc32: UInt32, sha256: [UInt8])? = nil,
        target: NativeMessage.Target, label: String, link: inout (any Link)?
    )
        async throws(TransferError) -> TransferResult
    {
        let tuning = updater.tuning
        guard let hello = lastHello, let current = link else {
            throw TransferError(.protocolViolation, step: .transfer, "transfer without a connection")
        }
        let compact = sendsCompactData(on: current, hello: hello)
        let packetSize = try packetSize(link: current, hello: hello, compact: compact)
        lastTransferCompact = compact
        // The device's receive queue, as HELLO announced it (0 from a device that does not say).
        let receiverBuffer = hello.bufferCount > 0 ? Int(hello.bufferCount) : nil
        var stream: any ByteSource = image
        var compressed = false
        // An image in memory is deflated whole; one sent from its file is too large to hold, let alone twice.
        let inMemory = image as? [UInt8]
        // A delta patch goes instead of the image (and is not deflated: heatshrink already compressed it).
        let delta = target == .firmware ? try deltaPatch(for: image, hello: hello) : nil
        if let delta { stream = delta.patch }
        if delta == nil, tuning.compression != .off {
            if !hello.capabilities.contains(.deflate) {
                if tuning.compression == .on {
                    throw TransferError(.deviceRefused, step: .transfer, "the device does not accept compressed transfers: use --compression off")
                }
            } else if let inMemory {
                if let deflated = Self.deflate(inMemory), tuning.compression == .on || deflated.count * 10 < inMemory.count * 9 {
                    stream = deflated
                    compressed = true
                    updater.onEvent(.note("compressed \(inMemory.count) bytes to \(deflated.count)"))
                }
            } else if tuning.compression == .on {
                throw TransferError(
                    .badInput, step: .transfer,
                    "an image of \(image.count) bytes is sent from its file and cannot be compressed: use --compression auto or off")
            }
        }
        let digests: (crc32: UInt32, sha256: [UInt8])
        do { digests = try known ?? image.digests() } catch { throw TransferError(.badInput, step: .transfer, "\(error)") }
        let start = NativeMessage.Start(
            target: target, compressed: compressed, compact: compact, imageSize: UInt32(image.count), streamSize: UInt32(stream.count),
            crc32: digests.crc32, sha256: digests.sha256, packetSize: UInt16(packetSize),
            ackInterval: UInt16(tuning.ackInterval(receiverBuffer: receiverBuffer)), label: label, deltaBaseSHA256: delta?.base)
        let onEvent = updater.onEvent
        let engine = TransferEngine(
            source: stream, packetSize: packetSize, wire: NativeWire(compact: compact, ackIntervalChanges: hello.capabilities.contains(.ackIntervalChange)), tuning: tuning,
            clock: updater.clock, receiverBuffer: receiverBuffer, logger: updater.logger
        ) { onEvent(.progress($0)) }
        let began = updater.clock.now
        var resumption = TransferResumption(limit: tuning.maxReconnects)
        while true {
            do {
                guard let active = link else { throw LinkError.disconnected("no link") }
                let ranges = try await request(NativeStartRequest(start: start), on: active, step: .transfer)
                guard ranges.status == .ok else {
                    throw TransferError(.deviceRefused, step: .transfer, "the device refused the transfer: \(ranges.status)")
                }
                var held = RangeSet()
                for range in ranges.ranges { held.insert(Int(range.lowerBound)..<Int(range.upperBound)) }
                if !held.isEmpty { updater.onEvent(.note("device already holds \(held.count) of \(stream.count) bytes; resuming")) }
                engine.resume(held: held)
                try await engine.run(over: active)
                break
            } catch let error as TransferError where error.code != .linkLost && error.code != .timeout {
                throw error
            } catch {
                await link?.close()
                link = nil
                try resumption.linkDropped(error, onEvent: updater.onEvent)
                let (newLink, _) = try await connect(.resume, step: .transfer)
                link = newLink
            }
        }
        statistics = engine.statistics
        statistics.reconnects = resumption.reconnects
        return TransferSummary(
            streamBytes: stream.count, compressed: compressed, delta: delta != nil, packetSize: packetSize,
            elapsed: updater.clock.now - began)
    }

    static func deflate(_ bytes: [UInt8]) -> [UInt8]? {
        guard let deflater = try? Deflater(level: 9, format: .raw),
            let head = try? deflater.update(bytes), let tail = try? deflater.finish()
        else { return nil }
        return head + tail
    }

    /// VERIFY; after a compact transfer that fails it (damage the link layer's
    /// CRC let through, with no per-packet CRC to catch it), sends the stream
    /// again with full headers and verifies that.
    mutating func verifyResendingIfCompact(
        stream: any ByteSource, digests: (crc32: UInt32, sha256: [UInt8])? = nil,
        target: NativeMessage.Target, label: String, link: inout (any Link)?,
        result: inout TransferResult?
    ) async throws(TransferError) -> (ok: Bool, detail: String) {
        guard let active = link else { throw TransferError(.linkLost, step: .verify, "verify without a connection") }
        let verdict = try await verify(on: active)
        guard !verdict.ok, lastTransferCompact else { return verdict }
        updater.onEvent(.note("the device could not verify the stream (\(verdict.detail)); sending it again with a CRC on every packet"))
        fullHeadersOnly = true
        try await enterTransfer(closing: link)
        result = try await transfer(stream: stream, digests: digests, target: target, label: label, link: &link)
        enter(.verify)
        guard let again = link else { throw TransferError(.linkLost, step: .verify, "verify without a connection") }
        return try await verify(on: again)
    }

    func verify(on link: any Link) async throws(TransferError) -> (ok: Bool, detail: String) {
        let result = try await request(NativeVerifyRequest(), on: link, step: .verify, timeout: updater.timeouts.verify)
        switch result.status {
        case .ok: return (true, "ok")
        case .invalidState: return (false, "the transfer is incomplete")
        default: return (false, "device computed CRC-32 0x\(String(result.crc32, radix: 16)), SHA-256 \(result.sha256.hexString.prefix(16))…")
        }
    }

    /// The receiving side of `pull`: acknowledges and reports gaps like a device does.
    mutating func receive(size: Int, packetSize: Int, on link: any Link) async throws(TransferError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: size)
        var window = ReceiverWindow(packetCount: (size + packetSize - 1) / packetSize)
        let wire = NativeWire()
        let interval = updater.tuning.effectiveAckInterval
        let bitmapBytes = max(0, min(32, link.parameters.maximumPayload - 6))
        func acknowledge(_ window: inout ReceiverWindow) async throws(LinkError) {
            let ack = window.acknowledgement(bitmapBytes: bitmapBytes)
            try await link.send(wire.encodeAcknowledgement(nextExpected: ack.nextExpected, bitmap: ack.bitmap))
        }
        var idle = 0
        do {
            while !window.isComplete {
                let packet: [UInt8]
                do {
                    packet = try await withDeadline(updater.tuning.ackTimeout * 4, clock: updater.clock) { try await link.receive() }
                } catch is DeadlineExceeded {
                    idle += 1
                    if idle > updater.tuning.maxRetries {
                        throw TransferError(.timeout, step: .transfer, "the device stopped sending: check it is powered and in range")
                    }
                    try await acknowledge(&window)
                    continue
                }
                idle = 0
                switch wire.decodeTransferPacket(packet) {
                case .data(let sequence, let payload, let intact):
                    guard intact else {
                        statistics.corruptReceived += 1
                        try await link.send(wire.encodeNegativeAcknowledgement(first: sequence, count: 1, corrupt: true))
                        continue
                    }
                    switch window.receive(sequence: sequence) {
                    case .new(let index, let gap):
                        let offset = index * packetSize
                        let expected = min(packetSize, size - offset)
                        guard payload.count == expected else {
                            throw TransferError(.protocolViolation, step: .transfer, "packet \(index) has \(payload.count) bytes, expected \(expected)")
                        }
                        buffer.replaceSubrange(offset..<offset + expected, with: payload)
                        if let gap {
                            try await link.send(
                                wire.encodeNegativeAcknowledgement(
                                    first: SequenceNumber.wrap(gap.lowerBound), count: UInt16(clamping: gap.count), corrupt: false))
                        }
                    case .duplicate:
                        statistics.duplicatesReceived += 1
                    case .outOfWindow:
                        continue
                    }
                    if window.sinceAcknowledgement >= interval || window.isComplete {
                        try await acknowledge(&window)
                    }
                case .ackRequest:
                    try await acknowledge(&window)
                case .failure(let message):
                    throw TransferError(.deviceRefused, step: .transfer, message)
                default:
                    continue
                }
            }
        } catch let error as TransferError {
            throw error
        } catch {
            throw TransferError(.linkLost, step: .transfer, "\(error)")
        }
        return buffer
    }
}
