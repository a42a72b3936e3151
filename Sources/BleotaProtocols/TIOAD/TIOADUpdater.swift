import BleotaCodec
import BleotaEngine
import BleotaLink

/// The host half of ``TIOADProtocol``: Get Block Size → Image Identify → Start
/// OAD → each block the device asks for → OAD_DL_COMPLETE → Enable Image → the
/// device seen back.
///
/// The profile asks for each block after writing the one before, but writes
/// whichever block is the next it expects, asked for or not (`oad.c`,
/// `oadImgBlockWrite`), so bleota sends blocks ahead of the requests: a window
/// that grows by one block at each request, from 1 to 16 (``BlockWindow``).
/// The profile cannot take a block back: a block that went missing (no request
/// within the response time), a damaged or unexpected one (OAD_BUFFER_OFL) or a
/// CRC that does not match at the end (OAD_CRC_ERR) reset it, so bleota
/// cancels and starts again from Image Identify, up to `retries` times, with
/// fewer blocks ahead if it had more than one. A refusal of the image (another chip family, BIM version,
/// image type, too big) ends the update with the device's status name.
package struct TIOADUpdater: ContextHost {
    package let context: HostContext

    package init(context: HostContext) { self.context = context }

    var tries: Int { context.tries(default: 4) }

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        var steps = FlashSteps(host: self, prepared: prepared)
        var machine = UpdateStateMachine(expectedVersion: prepared.version, applicationReceives: true)
        return try await machine.run(&steps)
    }

    /// An update's steps as TI OAD performs them, for the engine's lifecycle: the application
    /// downloads the image itself and checks its CRC before OAD_DL_COMPLETE (the transfer is
    /// its verification), Enable Image activates, and Get SW Version afterwards tells the new
    /// image from the old.
    struct FlashSteps: RecordedLifecycleSteps {
        let host: TIOADUpdater
        let image: [UInt8]
        let version: String
        var recorder: OperationRecorder
        var tries: UpdateTries
        var link: (any Link)?
        var statistics = TransferStatistics()
        var transferTime = Duration.zero
        var blockSize = 0
        var window: BlockWindow
        /// The running image's software version before the update, to tell the new image from the old one afterwards.
        var oldVersion: [UInt8]?
        /// Enable Image's refusal, when its answer came back and said so.
        var refusal: UInt8?
        /// Get SW Version's answer after the device came back.
        var running: [UInt8]?

        init(host: TIOADUpdater, prepared: PreparedImage) {
            self.host = host
            image = prepared.bytes
            version = prepared.version
            recorder = host.context.recorder("flash")
            recorder.beginQuietly(.load)
            tries = UpdateTries(limit: host.tries)
            window = host.context.explicitKnobs.contains(.window) ? BlockWindow(fixed: host.context.tuning.window) : BlockWindow()
        }

        var context: HostContext { host.context }
        var clock: any BleotaClock { host.clock }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            let link = try await context.connect(.initial, step: .connect)
            self.link = link
            oldVersion = (try? await host.softwareVersion(on: link)) ?? nil
            return .application
        }

        mutating func transfer() async throws(TryFailure) {
            let began = clock.now
            defer { transferTime += clock.now - began }
            do throws(TryFailure) {
                blockSize = try await host.download(image, on: link!, window: &window, statistics: &statistics)
            } catch {
                window.tryFailed()
                try? await host.send(.control, [TIOADCommand.cancelOAD.rawValue], on: link!)
                await link?.close()
                throw error
            }
        }

        mutating func retry(after retry: TryFailure.Retry) async throws(TransferError) {
            statistics.reconnects += 1
            context.onEvent(.note("\(retry.reason); starting again from Image Identify"))
            recorder.enter(.reconnect)
            link = try await context.connect(.resume, step: .reconnect)
        }

        mutating func triesExhausted(_ retry: TryFailure.Retry, attempts: Int) async -> TransferError {
            TransferError(.verificationFailed, step: .transfer, "the image did not arrive whole in \(attempts) tries (\(retry.reason)): move closer to the device")
        }

        /// Enable Image; its answer can be lost (or damaged) as the device resets, so what the
        /// device runs afterwards is read back: Get SW Version names the image's software version.
        mutating func activate() async throws(TransferError) -> Bool {
            do {
                try await host.send(.control, [TIOADCommand.enableImage.rawValue], on: link!)
                if let answer = try await host.controlAnswer(TIOADCommand.enableImage, on: link!), answer.count >= 2,
                    answer[answer.startIndex + 1] != 0
                {
                    refusal = answer[answer.startIndex + 1]
                }
            } catch {
                // The device resetting as it answers is expected.
            }
            return true
        }

        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
            let previous = link
            link = nil
            let back = try await context.reconnect(after: previous, expecting: .application)
            running = try? await host.softwareVersion(on: back)
            await back.close()
            return .application
        }

        /// Nil once the new image runs; otherwise the error says which runs.
        mutating func runningVersion() async throws(TransferError) -> String? {
            let newVersion = Array(image[32..<36])
            let device = host.device
            switch (running, refusal) {
            case (let version?, _) where version == newVersion && version != oldVersion:
                if refusal != nil { context.onEvent(.note("\(device) runs the new image although Enable Image's answer said otherwise (a damaged answer)")) }
            case (let version?, let refused?) where version == oldVersion && version != newVersion:
                var failure = TransferError(.deviceRefused, step: .activate, "\(device) refused Enable Image: \(TIOADStatus.name(refused))")
                failure.outcome = .oldImage(String(decoding: version, as: UTF8.self))
                throw failure
            case (let version?, nil) where version == oldVersion && version != newVersion:
                var failure = TransferError(
                    .confirmFailed, step: .confirm, "\(device) came back running its old image (software version \(String(decoding: version, as: UTF8.self)))")
                failure.outcome = .oldImage(String(decoding: version, as: UTF8.self))
                throw failure
            case (_, let refused?):
                // The versions cannot tell the images apart: the answer decides, and what runs is not known for sure.
                var failure = TransferError(.deviceRefused, step: .activate, "\(device) refused Enable Image: \(TIOADStatus.name(refused))")
                failure.outcome = .unknown
                throw failure
            default:
                break
            }
            return nil
        }

        mutating func finish() async -> UpdateReport {
            recorder.versionAfter = version
            var tuning = context.tuning
            tuning.packetSize = blockSize
            tuning.window = window.size
            return recorder.finish(
                bytes: image.count,
                transfer: TransferSummary(streamBytes: statistics.bytesOnWire, packetSize: blockSize, elapsed: transferTime),
                statistics: statistics, tuning: tuning)
        }
    }

    func send(_ channel: TIOADChannel, _ bytes: [UInt8], on link: any Link) async throws(LinkError) {
        try await link.send(channel: channel.rawValue, bytes)
    }

    /// The next notification on `channel` that `accept` takes, or nil after the response time.
    func notification(_ channel: TIOADChannel, on link: any Link, _ accept: (ArraySlice<UInt8>) -> Bool) async throws(LinkError) -> ArraySlice<UInt8>? {
        let deadline = clock.now + timeouts.response
        while deadline > clock.now, let packet = try await link.receiveMessage(within: deadline - clock.now, clock: clock) {
            guard case .packet(let number, let payload) = packet, number == channel.rawValue, accept(payload) else { continue }
            return payload
        }
        return nil
    }

    /// Get SW Version's four bytes, or nil when the device does not answer.
    func softwareVersion(on link: any Link) async throws(LinkError) -> [UInt8]? {
        try await send(.control, [TIOADCommand.getSoftwareVersion.rawValue], on: link)
        guard let answer = try await controlAnswer(.getSoftwareVersion, on: link), answer.count == 5 else { return nil }
        return Array(answer.dropFirst())
    }

    func controlAnswer(_ command: TIOADCommand, on link: any Link) async throws(LinkError) -> ArraySlice<UInt8>? {
        try await notification(.control, on: link) { $0.first == command.rawValue }
    }

    /// How many blocks go beyond the one the device asked for last. A real device's link layer
    /// holds back what its buffers cannot take, but a device whose queue drops what overflows
    /// it (the simulator's `slow-flash`) resets at the first block missing: the window starts at
    /// one block, as TI's own downloader keeps, and grows by one at each request; a try that
    /// fails with more than one block ahead lowers the most to two thirds of what it had.
    struct BlockWindow {
        /// Blocks sent and not yet asked past, at most.
        private(set) var size = 1
        private(set) var limit = 16
        private var fixed = false

        init() {}

        /// `--window`: this many, always.
        init(fixed size: Int) {
            self.size = max(1, size)
            limit = self.size
            fixed = true
        }

        /// The device asked for a block: one more may go ahead.
        mutating func asked() {
            if size < limit { size += 1 }
        }

        /// A try ended without the image; with blocks ahead, fewer go next time.
        mutating func tryFailed() {
            guard !fixed else { return }
            if size > 1 { limit = max(1, size * 2 / 3) }
            size = 1
        }
    }

    /// Block size, Identify, Start and every block; returns the block size.
    func download(_ image: [UInt8], on link: any Link, window: inout BlockWindow, statistics: inout TransferStatistics) async throws(TryFailure) -> Int {
        do {
            try await send(.control, [TIOADCommand.getBlockSize.rawValue], on: link)
            guard let answer = try await controlAnswer(.getBlockSize, on: link), answer.count == 3 else {
                throw TryFailure.retry("\(device) did not answer Get Block Size")
            }
            let blockSize = Int(answer[answer.startIndex + 1]) | Int(answer[answer.startIndex + 2]) << 8
            guard blockSize > 4, blockSize <= link.parameters.maximumPayload - 1 else {
                throw TryFailure.final(
                    TransferError(
                        .protocolViolation, step: .transfer,
                        "\(device) asks for blocks of \(blockSize) bytes, which its link (\(link.parameters.maximumPayload - 1)-byte writes) cannot carry"))
            }
            // 22 bytes where they fit; the 18 TI's own app sends (without the software version) on a 23-byte MTU.
            try await send(.identify, Array(TIOADImageHeader.identify(image).prefix(max(18, link.parameters.maximumPayload - 1))), on: link)
            guard let status = try await notification(.identify, on: link, { $0.count == 1 })?.first else {
                throw TryFailure.retry("\(device) did not answer Image Identify")
            }
            guard status == TIOADStatus.success.rawValue else {
                throw TryFailure.final(TransferError(.deviceRefused, step: .transfer, "\(device) refused the image: \(TIOADStatus.name(status))"))
            }
            try await send(.control, [TIOADCommand.startOAD.rawValue], on: link)
            let data = blockSize - 4
            let blocks = UInt32((image.count + data - 1) / data)
            /// The next block to send, and the one the device asked for last (every block below it is written).
            var next: UInt32 = 0
            var asked: UInt32 = 0
            var highest: UInt32 = 0
            while true {
                guard let payload = try await notification(.control, on: link, { TIOADBlockRequest(decoding: $0) != nil }),
                    let request = TIOADBlockRequest(decoding: payload)
                else {
                    statistics.ackTimeouts += 1
                    throw TryFailure.retry("\(device) asked for no block within \(timeouts.response) (a block or its request was lost)")
                }
                switch TIOADStatus(rawValue: request.status) {
                case .success?:
                    guard request.block < blocks else {
                        throw TryFailure.final(TransferError(.protocolViolation, step: .transfer, "\(device) asked for block \(request.block), past the image's end"))
                    }
                    // A request below one already asked for is an old one, delivered twice.
                    guard request.block >= asked else { continue }
                    if request.block > asked { window.asked() }
                    asked = request.block
                    // Asked for a block not sent yet: the device wants it (the first one, or after a
                    // block that never came, which a device resets at instead).
                    if next <= asked { next = asked }
                    statistics.acknowledgements += 1
                    while next < blocks && next < asked + UInt32(window.size) {
                        let from = Int(next) * data
                        let bytes = TIOADWire.u32(next) + image[from..<min(image.count, from + data)]
                        try await send(.block, bytes, on: link)
                        statistics.packetsSent += 1
                        if next < highest { statistics.packetsResent += 1 }
                        highest = max(highest, next + 1)
                        statistics.bytesOnWire += bytes.count
                        next += 1
                    }
                    let from = Int(asked) * data
                    context.onEvent(
                        .progress(
                            TransferProgress(
                                bytesAcknowledged: from, totalBytes: image.count, packetsSent: statistics.packetsSent,
                                packetsResent: statistics.packetsResent, packetsLost: statistics.packetsLost,
                                elapsed: .zero, window: window.size, interPacketDelay: .zero)))
                case .downloadComplete?:
                    return blockSize
                case .bufferOverflow?, .crcError?, .notStarted?, .flashError?:
                    statistics.packetsLost += 1
                    throw TryFailure.retry("\(device) answered \(TIOADStatus.name(request.status))")
                default:
                    throw TryFailure.final(TransferError(.deviceRefused, step: .transfer, "\(device) stopped the download: \(TIOADStatus.name(request.status))"))
                }
            }
        } catch let failure as TryFailure {
            throw failure
        } catch {
            throw TryFailure.retry("the link dropped during the transfer (\(error))")
        }
    }
}
