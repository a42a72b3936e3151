import BleotaCodec
import BleotaEngine
import BleotaLink
import Logging

/// How far an SMP upgrade goes.
public enum SMPUpgradeMode: String, Sendable, Hashable, Codable, CaseIterable {
    /// Upload, mark for a test boot, reset, check the new image runs, confirm it.
    case testAndConfirm = "test-and-confirm"
    /// Upload, mark for a test boot, reset, check it runs; MCUboot reverts it at the next reset unless the app confirms.
    case test
    /// Upload, mark permanent, reset, check it runs (no revert possible).
    case confirm
    /// Upload only; the image waits in the secondary slot.
    case upload = "upload-only"
}

/// The host half of an MCUmgr/MCUboot update over any ``Link``:
/// upload (pipelined, resumable), verify the slot's hash, mark, reset, wait
/// for the device to come back by reconnecting (never a fixed sleep), read
/// the image state, confirm. Every step is reported and every failure named
/// by the step it happened in.
public struct SMPUpdater: Sendable {
    public var connector: any DeviceConnector
    public var clock: any BleotaClock
    public var timeouts: StepTimeouts
    /// Requests in flight during an upload; nil = the device's buffer count − 1.
    public var window: Int?
    /// Data bytes per upload request; nil = as many as the device's buffer and the link allow.
    public var chunkSize: Int?
    public var logger: Logger
    public var onEvent: @Sendable (UpdateEvent) -> Void

    public init(connector: any DeviceConnector, clock: any BleotaClock, timeouts: StepTimeouts = StepTimeouts(),
                window: Int? = nil, chunkSize: Int? = nil, logger: Logger = Logger(label: "bleota.smp"),
                onEvent: @escaping @Sendable (UpdateEvent) -> Void = { _ in }) {
        self.connector = connector
        self.clock = clock
        self.timeouts = timeouts
        self.window = window
        self.chunkSize = chunkSize
        self.logger = logger
        self.onEvent = onEvent
    }

    /// What an upload did, for reports and the benchmark.
    public struct UploadResult: Sendable {
        public var bytes: Int
        public var elapsed: Duration
        public var requests: Int
        public var resentBytes: Int
        public var reconnects: Int
        public var window: Int
        public var chunkSize: Int
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

    func connect(_ purpose: ConnectPurpose, step: UpdateStep, timeout: Duration? = nil) async throws(TransferError) -> SMPConnection {
        do {
            let link = try await connector.connect(for: purpose, timeout: timeout ?? timeouts.connect)
            return SMPConnection(link: link, clock: clock)
        } catch {
            throw TransferError(.linkLost, step: step, "cannot reach \(connector.description): \(error)")
        }
    }

    /// The request sizes an upload uses on `connection`: window and data bytes per request.
    func uploadShape(_ parameters: MCUmgrParameters, link: any Link, total: Int) -> (window: Int, chunk: Int) {
        let window = max(1, self.window ?? (parameters.bufferCount - 1))
        let overhead = SMPUploadRequest.overhead(dataSize: parameters.bufferSize, maximumOffset: total, first: false)
        var chunk = max(1, parameters.bufferSize - overhead)
        let payload = link.parameters.maximumPayload
        if payload < parameters.bufferSize {
            // Fill whole link packets: a request of k full packets, not k and a sliver.
            let packets = (chunk + overhead) / payload
            if packets >= 1 { chunk = max(1, packets * payload - overhead) }
        }
        if let chunkSize { chunk = min(chunk, max(1, chunkSize)) }
        return (window, chunk)
    }

    /// Uploads `image` from wherever the device already is; resumes after a dropped link.
    func upload(_ image: [UInt8], sha: [UInt8], upgrade: Bool, connection start: SMPConnection,
                parameters: MCUmgrParameters) async throws(TransferError) -> (UploadResult, SMPConnection) {
        var connection = start
        let began = clock.now
        var result = UploadResult(bytes: image.count, elapsed: .zero, requests: 0, resentBytes: 0, reconnects: 0,
                                  window: 0, chunkSize: 0)
        var highestSent = 0
        var restarts = 0
        // Set once packets go missing; see uploadOnce.
        var oneAtATime = false
        while true {
            do {
                try await uploadOnce(image, sha: sha, upgrade: upgrade, connection: connection, parameters: parameters,
                                     began: began, result: &result, highestSent: &highestSent, oneAtATime: &oneAtATime)
                result.elapsed = clock.now - began
                return (result, connection)
            } catch .device(let error) where error.group == SMPGroup.image && error.rc == 24 && error.reason != nil && restarts < 2 {
                // The device's hash of what arrived differs (a fragment was lost inside a request):
                // it dropped the upload; send it again.
                restarts += 1
                oneAtATime = true
                onEvent(.note("the device's SHA-256 of the upload did not match; uploading again, one request at a time"))
            } catch .linkLost(let error) {
                guard result.reconnects < timeouts.attempts else {
                    throw TransferError(.linkLost, step: .transfer, "the link dropped \(result.reconnects + 1) times during the upload: \(error)")
                }
                result.reconnects += 1
                onEvent(.note("link lost (\(error)); reconnecting to resume the upload"))
                await connection.close()
                connection = try await connect(.resume, step: .transfer)
            } catch {
                throw fail(.transfer, error)
            }
        }
    }

    /// One pass of the upload on one connection.
    ///
    /// SMP carries no checksum per request, so a write lost inside a request
    /// that has another right behind it lets the device glue the next
    /// request's first packet into the gap and store wrong bytes at the right
    /// offset; only the SHA-256 at the end shows it. With one request in
    /// flight a lost write merely leaves a request unfinished, which the
    /// device drops after a pause. So the pipeline runs while the link is
    /// clean, and at the first sign of loss (a timeout, an answer to no
    /// request, "invalid argument") the upload drops to one request at a time.
    private func uploadOnce(_ image: [UInt8], sha: [UInt8], upgrade: Bool, connection: SMPConnection, parameters: MCUmgrParameters,
                            began: Duration, result: inout UploadResult, highestSent: inout Int,
                            oneAtATime: inout Bool) async throws(SMPClientError) {
        let (fullWindow, chunk) = uploadShape(parameters, link: connection.link, total: image.count)
        var window = oneAtATime ? 1 : fullWindow
        // Data per request; halved on each loss once the window is 1 (a long request on a short
        // MTU spans so many writes that it seldom arrives whole), never below one link packet's worth.
        var chunkLimit = oneAtATime ? max(1, chunk / 2) : chunk
        let smallestChunk = max(16, min(chunk, connection.link.parameters.maximumPayload - 24))
        // Clean answers in a row since the last loss: after 8, requests grow back (doubling, up to
        // the full chunk) — loss comes and goes, and small requests waste the link's headers.
        var cleanRun = 0
        func slowDown() {
            cleanRun = 0
            if window == 1 { chunkLimit = max(smallestChunk, chunkLimit / 2) }
            guard window > 1 else { return }
            window = 1
            oneAtATime = true
            onEvent(.note("packets are being lost: sending one upload request at a time (SMP cannot tell a damaged request otherwise)"))
        }
        result.window = fullWindow
        result.chunkSize = chunk
        // The first request announces the image; the device answers with where it stands (0, or a resume point).
        let firstOverhead = SMPUploadRequest.overhead(dataSize: chunk, maximumOffset: image.count, first: true)
            - SMPUploadRequest.overhead(dataSize: chunk, maximumOffset: image.count, first: false)
        // On a link that loses writes a big request rarely arrives whole: each failed try halves
        // the data it carries (not below 32 bytes, which Zephyr wants to see the image header).
        var firstChunk = min(image.count, max(1, chunk - firstOverhead, oneAtATime ? 32 : 1))
        var answer: CBOR?
        for attempt in 0..<(timeouts.attempts * 2) {
            if attempt > 0 {
                firstChunk = max(min(32, image.count), firstChunk / 2)
                slowDown()
            }
            let first = SMPUploadRequest(offset: 0, data: Array(image[0..<firstChunk]), length: image.count, sha: sha, upgrade: upgrade)
            do {
                answer = try await connection.request(.write, group: SMPGroup.image, command: SMPCommandID.imageUpload, body: first.body,
                                                      timeout: attempt == 0 ? timeouts.verify : timeouts.response, attempts: 1,
                                                      what: "the first upload request")
                break
            } catch .timeout {
                continue
            } catch .device(let error) where error.group == nil && error.rc == 3 {
                continue // a damaged request: smaller, again
            }
        }
        guard let answer else { throw .timeout("the first upload request after \(timeouts.attempts * 2) tries") }
        result.requests += 1
        if highestSent > 0 { result.resentBytes += firstChunk }
        highestSent = max(highestSent, firstChunk)
        guard var confirmed = answer["off"]?.int, (0...image.count).contains(confirmed) else {
            throw .field("the upload answer's 'off' is missing or outside the image")
        }
        if confirmed > firstChunk { onEvent(.note("the device already holds \(confirmed) of \(image.count) bytes; resuming")) }
        report(confirmed, of: image.count, result: result, began: began, window: window)

        struct InFlight { var sequence: UInt8; var end: Int }
        var inFlight: [InFlight] = []
        var next = confirmed
        var timeoutsInARow = 0
        var strays = 0
        // Answers normally come within a few round trips; waiting the full response timeout
        // after a lost write would make a lossy upload crawl. Never below 600 ms, which
        // leaves the device time to drop a half-received request (it does after 250 ms).
        var roundTrip: Duration?
        var sentAt: [UInt8: Duration] = [:]
        func answerTimeout() -> Duration {
            guard let roundTrip else { return timeouts.response }
            return min(timeouts.response, max(.milliseconds(600), roundTrip * 3))
        }
        while confirmed < image.count {
            while inFlight.count < window, next < image.count {
                let end = min(image.count, next + chunkLimit)
                let request = SMPUploadRequest(offset: next, data: Array(image[next..<end]))
                let number = try await connection.send(.write, group: SMPGroup.image, command: SMPCommandID.imageUpload, body: request.body)
                result.requests += 1
                if next < highestSent { result.resentBytes += min(end, highestSent) - next }
                highestSent = max(highestSent, end)
                inFlight.append(InFlight(sequence: number, end: end))
                sentAt[number] = clock.now
                next = end
            }
            guard let response = try await connection.nextResponse(timeout: answerTimeout()) else {
                // A request or its answer was lost: start again from what the device confirmed.
                timeoutsInARow += 1
                guard timeoutsInARow <= timeouts.attempts * 2 else { throw .timeout("the upload at offset \(confirmed)") }
                slowDown()
                connection.resetReassembly()
                inFlight.removeAll()
                next = confirmed
                continue
            }
            guard let index = inFlight.firstIndex(where: { $0.sequence == response.header.sequence }) else {
                // An answer to a request given up on, or to a request the device pieced together
                // from fragments of two (its sequence number is whatever byte landed there).
                strays += 1
                guard strays <= 64 else {
                    throw .sequence("the device keeps answering sequence numbers no upload request has (last \(response.header.sequence))")
                }
                if !connection.wasSent(response.header.sequence) { slowDown() }
                continue
            }
            if let sent = sentAt.removeValue(forKey: response.header.sequence) {
                // Send to answer, queueing behind earlier requests included: what the next one will see.
                let sample = clock.now - sent
                roundTrip = roundTrip.map { ($0 * 7 + sample) / 8 } ?? sample
            }
            if let error = SMPDeviceError(response: response.body) {
                // "Invalid argument" to a chunk is a request the device got damaged (a fragment
                // lost on the way): resend from its offset. Anything else is the device's verdict.
                guard error.group == nil, error.rc == 3, timeoutsInARow < timeouts.attempts * 2 else { throw .device(error) }
                timeoutsInARow += 1
                slowDown()
                inFlight.removeAll()
                next = confirmed
                continue
            }
            timeoutsInARow = 0
            cleanRun += 1
            if cleanRun >= 8, chunkLimit < chunk {
                chunkLimit = min(chunk, chunkLimit * 2)
                cleanRun = 0
            }
            guard let offset = response.body["off"]?.int, (0...image.count).contains(offset) else {
                throw .field("the upload answer's 'off' is missing or outside the image")
            }
            if response.body["match"]?.boolean == false {
                throw .device(SMPDeviceError(group: SMPGroup.image, rc: 24, reason: "the device's SHA-256 of the upload does not match"))
            }
            let expected = inFlight[index].end
            inFlight.removeSubrange(...index)
            if offset == expected {
                confirmed = max(confirmed, offset)
            } else {
                // The device's offset wins: whatever is in flight beyond it is moot.
                confirmed = offset
                inFlight.removeAll()
                next = offset
            }
            report(confirmed, of: image.count, result: result, began: began, window: window)
        }
    }

    private func report(_ done: Int, of total: Int, result: UploadResult, began: Duration, window: Int) {
        progress(done, of: total, requests: result.requests, resent: result.resentBytes > 0, began: began, window: window)
    }

    func progress(_ done: Int, of total: Int, requests: Int, resent: Bool = false, began: Duration, window: Int) {
        onEvent(.progress(TransferProgress(bytesAcknowledged: done, totalBytes: total, packetsSent: requests,
                                           packetsResent: resent ? 1 : 0, packetsLost: 0,
                                           elapsed: clock.now - began, window: window, interPacketDelay: .zero)))
    }

    // MARK: Upgrade

    /// Runs the upgrade of `imageBytes` (an MCUboot image) in `mode`.
    public func upgrade(imageBytes: [UInt8], mode: SMPUpgradeMode) async throws(TransferError) -> UpdateReport {
        let started = clock.now
        var stepSeconds: [String: Double] = [:]
        var stepStarted = started
        var currentStep = UpdateStep.load
        func enter(_ step: UpdateStep) {
            stepSeconds[currentStep.rawValue, default: 0] += (clock.now - stepStarted).seconds
            currentStep = step
            stepStarted = clock.now
            onEvent(.step(step))
        }
        let image: MCUbootImage
        do { image = try MCUbootImage(decoding: imageBytes) } catch {
            throw TransferError(.badInput, step: .load, "not an MCUboot image: \(error)")
        }
        do { try image.verifyHash() } catch { throw TransferError(.badInput, step: .load, error.description) }
        guard let hash = image.hashTLV else { throw TransferError(.badInput, step: .load, "the image has no SHA-256 TLV") }

        enter(.connect)
        var connection = try await connect(.initial, step: .connect)
        let parameters: MCUmgrParameters
        let before: [SMPImageSlot]
        do {
            parameters = try await connection.parameters(timeout: timeouts.response)
            before = try await connection.imageState(timeout: timeouts.response)
        } catch { throw fail(.connect, error) }
        let versionBefore = before.first(where: \.active)?.version
        var result = UploadResult(bytes: imageBytes.count, elapsed: .zero, requests: 0, resentBytes: 0, reconnects: 0, window: 0, chunkSize: 0)

        if before.first(where: \.active)?.hash == hash {
            onEvent(.note("the device already runs this image (\(image.version))"))
        } else {
            if before.contains(where: { $0.hash == hash && !$0.active }) {
                onEvent(.note("the image is already in the secondary slot; skipping the upload"))
            } else {
                enter(.transfer)
                (result, connection) = try await upload(imageBytes, sha: SHA256Digest.hash(imageBytes), upgrade: false,
                                                        connection: connection, parameters: parameters)
            }
            enter(.verify)
            let slots: [SMPImageSlot]
            do { slots = try await connection.imageState(timeout: timeouts.response) } catch { throw fail(.verify, error) }
            guard let uploaded = slots.first(where: { !$0.active && $0.hash == hash }) else {
                throw TransferError(.verificationFailed, step: .verify,
                                    "the device does not list the uploaded image (hash \(hash.hexString.prefix(16))…) in its secondary slot: it did not verify there")
            }
            logger.debug("secondary slot holds \(uploaded.version)")
            if mode == .upload {
                await connection.close()
                stepSeconds[currentStep.rawValue, default: 0] += (clock.now - stepStarted).seconds
                return makeReport(result, image: imageBytes, before: versionBefore, after: versionBefore, started: started,
                                  stepSeconds: stepSeconds)
            }
            enter(.activate)
            do {
                _ = try await connection.setImageState(hash: hash, confirm: mode == .confirm, timeout: timeouts.response)
                try await connection.reset(timeout: timeouts.response)
            } catch { throw fail(.activate, error) }
            await connection.close()
            enter(.reconnect)
            connection = try await waitForReturn()
        }
        let after: [SMPImageSlot]
        do { after = try await connection.imageState(timeout: timeouts.response) } catch { throw fail(.reconnect, error) }
        guard let running = after.first(where: \.active), running.hash == hash else {
            throw TransferError(.verificationFailed, step: .reconnect,
                                "the device came back running \(after.first(where: \.active)?.version ?? "nothing"), not \(image.version): MCUboot refused or reverted the image")
        }
        if mode == .testAndConfirm, !running.confirmed {
            enter(.confirm)
            do {
                let slots = try await connection.setImageState(hash: nil, confirm: true, timeout: timeouts.response)
                guard slots.first(where: \.active)?.confirmed == true else {
                    throw TransferError(.confirmFailed, step: .confirm, "the device did not mark the running image confirmed")
                }
            } catch let error as TransferError { throw error } catch let error as SMPClientError { throw fail(.confirm, error) } catch {
                throw TransferError(.confirmFailed, step: .confirm, "\(error)")
            }
        }
        await connection.close()
        stepSeconds[currentStep.rawValue, default: 0] += (clock.now - stepStarted).seconds
        return makeReport(result, image: imageBytes, before: versionBefore, after: running.version, started: started,
                          stepSeconds: stepSeconds)
    }

    /// After a reset: reconnect until the device answers again (it is away for the swap).
    func waitForReturn() async throws(TransferError) -> SMPConnection {
        do {
            return try await retryingUntil(deadline: clock.now + timeouts.reboot, clock: clock, pause: .milliseconds(200)) {
                remaining throws(ReturnFailure) in
                let link: any Link
                do throws(LinkError) { link = try await connector.connect(for: .application, timeout: remaining) } catch {
                    throw ReturnFailure(description: error.description)
                }
                let connection = SMPConnection(link: link, clock: clock, firstSequence: 0x80)
                do throws(SMPClientError) {
                    _ = try await connection.echo("bleota", timeout: timeouts.response)
                    return connection
                } catch {
                    await connection.close()
                    throw ReturnFailure(description: error.description)
                }
            }
        } catch {
            let lastError = error.lastError?.description ?? "no attempt made"
            throw TransferError(.timeout, step: .reconnect, "the device did not come back within \(timeouts.reboot) after the reset: \(lastError)")
        }
    }

    /// Why one attempt of ``waitForReturn()`` failed: the connect's or the echo's message.
    struct ReturnFailure: Error {
        var description: String
    }

    func makeReport(_ result: UploadResult, image: [UInt8], before: String?, after: String?, started: Duration,
                    stepSeconds: [String: Double], operation: String = "flash") -> UpdateReport {
        var statistics = TransferStatistics()
        statistics.packetsSent = result.requests
        statistics.reconnects = result.reconnects
        statistics.bytesOnWire = image.count + result.resentBytes
        var tuning = TransferTuning()
        tuning.window = result.window
        tuning.packetSize = result.chunkSize
        var report = UpdateReport(operation: operation, device: connector.description, bytes: image.count, streamBytes: image.count,
                                  compressed: false, packetSize: result.chunkSize, transferSeconds: result.elapsed.seconds,
                                  totalSeconds: (clock.now - started).seconds, statistics: statistics, stepSeconds: stepSeconds,
                                  tuning: tuning)
        report.versionBefore = before
        report.versionAfter = after
        report.protocolName = "smp"
        return report
    }
}

// MARK: Files (the file-system group)

extension SMPUpdater {
    /// A device path for `name`: as given when absolute, else under Zephyr's usual LittleFS mount.
    public static func devicePath(_ name: String) -> String { name.hasPrefix("/") ? name : "/lfs/" + name }

    /// Writes `file` to `name` on the device, then checks the device's SHA-256 of it.
    public func push(file: [UInt8], name: String) async throws(TransferError) -> UpdateReport {
        try await fileSession("push", name: name) { (connection: SMPConnection, parameters: MCUmgrParameters, path: String, began: Duration) async throws(TransferError) -> ([UInt8], UploadResult) in
            var offset = 0
            var requests = 0
            var resent = 0
            let chunk = max(1, min(chunkSize ?? .max, parameters.bufferSize - SMPHeader.size - 32 - path.utf8.count))
            repeat {
                let end = min(file.count, offset + chunk)
                let request = SMPFileUploadRequest(name: path, offset: offset, data: Array(file[offset..<end]),
                                                   length: offset == 0 ? file.count : nil)
                let answer: CBOR
                do throws(SMPClientError) {
                    answer = try await connection.request(.write, group: SMPGroup.fileSystem, command: SMPCommandID.file, body: request.body,
                                                          timeout: timeouts.response, attempts: timeouts.attempts, what: "the file upload at \(offset)")
                } catch { throw fail(.transfer, error) }
                requests += 1
                guard let next = answer["off"]?.int, (0...file.count).contains(next) else {
                    throw TransferError(.protocolViolation, step: .transfer, "the file upload answer's 'off' is missing or outside the file")
                }
                if next < end { resent += end - next }
                offset = next
                progress(offset, of: file.count, requests: requests, began: began, window: 1)
            } while offset < file.count
            return (file, UploadResult(bytes: file.count, elapsed: clock.now - began, requests: requests, resentBytes: resent,
                                       reconnects: 0, window: 1, chunkSize: chunk))
        }.report
    }

    /// Reads `name` from the device, checking its SHA-256 when the device can compute it.
    public func pull(name: String) async throws(TransferError) -> ([UInt8], UpdateReport) {
        try await fileSession("pull", name: name) { (connection: SMPConnection, parameters: MCUmgrParameters, path: String, began: Duration) async throws(TransferError) -> ([UInt8], UploadResult) in
            var file: [UInt8] = []
            var total: Int?
            var requests = 0
            repeat {
                let answer: CBOR
                do throws(SMPClientError) {
                    answer = try await connection.request(.read, group: SMPGroup.fileSystem, command: SMPCommandID.file,
                                                          body: .textMap(["name": .text(path), "off": CBOR(file.count)]),
                                                          timeout: timeouts.response, attempts: timeouts.attempts,
                                                          what: "the file download at \(file.count)")
                } catch { throw fail(.transfer, error) }
                requests += 1
                if total == nil {
                    guard let length = answer["len"]?.int, length >= 0 else {
                        throw TransferError(.protocolViolation, step: .transfer, "the first download answer lacks the file's 'len'")
                    }
                    total = length
                }
                guard answer["off"]?.int == file.count, let data = answer["data"]?.byteString,
                      file.count + data.count <= total!, !(data.isEmpty && file.count < total!) else {
                    throw TransferError(.protocolViolation, step: .transfer, "the download answer does not continue at offset \(file.count)")
                }
                file += data
                progress(file.count, of: total!, requests: requests, began: began, window: 1)
            } while file.count < total!
            return (file, UploadResult(bytes: file.count, elapsed: clock.now - began, requests: requests, resentBytes: 0,
                                       reconnects: 0, window: 1, chunkSize: parameters.bufferSize))
        }
    }

    /// connect → read the parameters → `transfer` → the device's SHA-256 of the file → report.
    /// The connection is closed however it ends.
    private func fileSession(_ operation: String, name: String,
                             transfer: (SMPConnection, MCUmgrParameters, String, Duration) async throws(TransferError) -> ([UInt8], UploadResult))
        async throws(TransferError) -> (file: [UInt8], report: UpdateReport) {
        let started = clock.now
        let path = Self.devicePath(name)
        onEvent(.step(.connect))
        let connection = try await connect(.initial, step: .connect)
        do throws(TransferError) {
            let parameters: MCUmgrParameters
            do { parameters = try await connection.parameters(timeout: timeouts.response) } catch { throw fail(.connect, error) }
            onEvent(.step(.transfer))
            let (file, result) = try await transfer(connection, parameters, path, clock.now)
            onEvent(.step(.verify))
            try await verifyFile(path, expected: SHA256Digest.hash(file), length: file.count, connection: connection)
            await connection.close()
            return (file, makeReport(result, image: file, before: nil, after: nil, started: started, stepSeconds: [:], operation: operation))
        } catch {
            await connection.close()
            throw error
        }
    }

    /// The file group's hash command (command 2, SHA-256) against what was sent or received.
    func verifyFile(_ path: String, expected: [UInt8], length: Int, connection: SMPConnection) async throws(TransferError) {
        let answer: CBOR
        do {
            answer = try await connection.request(.read, group: SMPGroup.fileSystem, command: 2,
                                                  body: .textMap(["name": .text(path), "type": .text("sha256")]),
                                                  timeout: timeouts.verify, attempts: timeouts.attempts, what: "the file hash request")
        } catch .device(let error) where error.group == nil && error.rc == 8 {
            onEvent(.note("the device cannot hash files (not supported); the transfer's sizes matched"))
            return
        } catch {
            throw fail(.verify, error)
        }
        guard answer["output"]?.byteString == expected, answer["len"]?.int == length else {
            throw TransferError(.verificationFailed, step: .verify, "the device's SHA-256 of \(path) differs from the host's: the copy is damaged")
        }
    }
}
