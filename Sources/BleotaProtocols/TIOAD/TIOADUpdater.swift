import BleotaCodec
import BleotaEngine
import BleotaLink

/// The host half of ``TIOADProtocol``: Get Block Size → Image Identify → Start
/// OAD → each block the device asks for → OAD_DL_COMPLETE → Enable Image → the
/// device seen back.
///
/// The profile keeps exactly one block in flight and cannot take one back: a
/// block that went missing (no request within the response time), a damaged
/// one (OAD_BUFFER_OFL) or a CRC that does not match at the end (OAD_CRC_ERR)
/// reset it, so bleota cancels and starts again from Image Identify, up to
/// `retries` times. A refusal of the image (another chip family, BIM version,
/// image type, too big) ends the update with the device's status name.
package struct TIOADUpdater: ContextHost {
    package let context: HostContext

    package init(context: HostContext) { self.context = context }

    var tries: Int { context.tries(default: 4) }

    package func flash(_ prepared: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        let image = prepared.bytes
        var recorder = context.recorder("flash")
        recorder.beginQuietly(.load)
        recorder.enter(.connect)
        var statistics = TransferStatistics()
        var transferTime = Duration.zero
        var link = try await context.connect(.initial, step: .connect)
        // The running image's software version, to tell the new image from the old one afterwards.
        let oldVersion = (try? await softwareVersion(on: link)) ?? nil
        var tries = UpdateTries(limit: self.tries)
        try await recorder.enterTransfer(closing: link)
        let blockSize = try await tries.run { (_: Int) async throws(TryFailure) -> Int in
            let began = clock.now
            defer { transferTime += clock.now - began }
            do throws(TryFailure) {
                return try await download(image, on: link, statistics: &statistics)
            } catch {
                try? await send(.control, [TIOADCommand.cancelOAD.rawValue], on: link)
                await link.close()
                throw error
            }
        } between: { (retry: TryFailure.Retry) async throws(TransferError) in
            let why = retry.reason
            statistics.reconnects += 1
            context.onEvent(.note("\(why); starting again from Image Identify"))
            recorder.enter(.reconnect)
            link = try await context.connect(.resume, step: .reconnect)
            try await recorder.enterTransfer(closing: link)
        } exhausted: { retry, attempts in
            let why = retry.reason
            return TransferError(.verificationFailed, step: .transfer, "the image did not arrive whole in \(attempts) tries (\(why)): move closer to the device")
        }
        recorder.enter(.activate)
        // Enable Image; its answer can be lost (or damaged) as the device resets, so what the device
        // runs afterwards is read back: Get SW Version names the image's software version.
        var refusal: UInt8?
        do {
            try await send(.control, [TIOADCommand.enableImage.rawValue], on: link)
            if let answer = try await controlAnswer(TIOADCommand.enableImage, on: link), answer.count >= 2, answer[answer.startIndex + 1] != 0 {
                refusal = answer[answer.startIndex + 1]
            }
        } catch {
            // The device resetting as it answers is expected.
        }
        recorder.enter(.confirm)
        await awaitDisconnect(link, clock: clock, timeout: timeouts.response)
        let back: any Link
        do { back = try await context.connect(.application, step: .confirm) } catch {
            var failure = error
            failure.outcome = .unknown
            throw failure
        }
        let newVersion = Array(image[32..<36])
        let running = try? await softwareVersion(on: back)
        await back.close()
        switch (running, refusal) {
        case (let version?, _) where version == newVersion && version != oldVersion:
            if refusal != nil { context.onEvent(.note("\(device) runs the new image although Enable Image's answer said otherwise (a damaged answer)")) }
        case (let version?, let refused?) where version == oldVersion && version != newVersion:
            var failure = TransferError(.deviceRefused, step: .activate, "\(device) refused Enable Image: \(TIOADStatus.name(refused))")
            failure.outcome = .oldImage(String(decoding: version, as: UTF8.self))
            throw failure
        case (let version?, nil) where version == oldVersion && version != newVersion:
            var failure = TransferError(.confirmFailed, step: .confirm, "\(device) came back running its old image (software version \(String(decoding: version, as: UTF8.self)))")
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
        recorder.versionAfter = prepared.version
        var tuning = context.tuning
        tuning.packetSize = blockSize
        tuning.window = 1
        return recorder.finish(
            bytes: image.count, transfer: TransferSummary(streamBytes: statistics.bytesOnWire, packetSize: blockSize, elapsed: transferTime),
            statistics: statistics, tuning: tuning)
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

    /// Block size, Identify, Start and every block; returns the block size.
    func download(_ image: [UInt8], on link: any Link, statistics: inout TransferStatistics) async throws(TryFailure) -> Int {
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
                    let from = Int(request.block) * data
                    guard from < image.count else {
                        throw TryFailure.final(TransferError(.protocolViolation, step: .transfer, "\(device) asked for block \(request.block), past the image's end"))
                    }
                    let bytes = TIOADWire.u32(request.block) + image[from..<min(image.count, from + data)]
                    try await send(.block, bytes, on: link)
                    statistics.packetsSent += 1
                    if request.block < highest { statistics.packetsResent += 1 }
                    highest = max(highest, request.block + 1)
                    statistics.bytesOnWire += bytes.count
                    statistics.acknowledgements += 1
                    context.onEvent(
                        .progress(
                            TransferProgress(
                                bytesAcknowledged: from, totalBytes: image.count, packetsSent: statistics.packetsSent,
                                packetsResent: statistics.packetsResent, packetsLost: statistics.packetsLost,
                                elapsed: .zero, window: 1, interPacketDelay: .zero)))
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
