import BleotaCodec
import BleotaEngine
import BleotaLink

/// The host half of ACME OTA: connect → read the version → START → the image
/// through bleota's transfer engine → END (the device checks the CRC-32) →
/// the device activates and reboots → reconnect → check the version. Steps,
/// progress and the report go through bleota's shared ``OperationRecorder``.
public struct AcmeHost: ProtocolHost {
    public let context: HostContext
    public init(context: HostContext) { self.context = context }

    public func flash(_ image: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        var recorder = context.recorder("flash")
        recorder.enter(.connect)
        var link = try await connect(.initial, step: .connect)
        recorder.versionBefore = try await version(on: link, step: .connect)

        try await recorder.enterTransfer(closing: link)
        let bytes = image.bytes
        let chunk = min(context.tuning.packetSize ?? .max, link.parameters.maximumPayload - AcmeWire().dataOverhead)
        guard chunk >= 1 else { throw TransferError(.deviceRefused, step: .transfer, "the link is too small for data packets") }
        let start = AcmeMessage.start(
            length: UInt32(bytes.count), crc32: CRC32.checksum(bytes), chunk: UInt16(clamping: chunk),
            version: image.version)
        let accepted = try await request(start, on: link, step: .transfer) { if case .status(let status, _, _) = $0 { status } else { nil } }
        guard accepted == .ok else { throw TransferError(.deviceRefused, step: .transfer, "the device refused the image: \(accepted)") }
        let began = context.clock.now
        let onEvent = context.onEvent
        let engine = TransferEngine(
            stream: bytes, packetSize: chunk, wire: AcmeWire(), tuning: context.tuning, clock: context.clock,
            logger: context.logger
        ) { onEvent(.progress($0)) }
        do { try await engine.run(over: link) } catch let error as TransferError { throw error } catch {
            throw TransferError(.linkLost, step: .transfer, "\(error)")
        }
        let transfer = TransferSummary(streamBytes: bytes.count, packetSize: chunk, elapsed: context.clock.now - began)

        recorder.enter(.verify)
        let verdict = try await request(.end, on: link, step: .verify, timeout: context.timeouts.verify) {
            if case .status(let status, _, _) = $0, status != .ok { status } else { nil }
        }
        guard verdict == .done else {
            throw TransferError(.verificationFailed, step: .verify, "the device rejected the image (\(verdict)); it was not activated")
        }
        recorder.enter(.activate)
        await link.close()
        recorder.enter(.reconnect)
        link = try await connect(.application, step: .reconnect, timeout: context.timeouts.reboot)
        recorder.enter(.confirm)
        let running = try await version(on: link, step: .confirm)
        await link.close()
        guard running == image.version else {
            throw TransferError(.confirmFailed, step: .confirm, "the device runs '\(running)', expected '\(image.version)'")
        }
        recorder.versionAfter = running
        var statistics = engine.statistics
        statistics.packetsSent = max(statistics.packetsSent, engine.packetCount)
        var tuning = context.tuning
        tuning.packetSize = chunk
        return recorder.finish(bytes: bytes.count, transfer: transfer, statistics: statistics, tuning: tuning)
    }

    private func connect(_ purpose: ConnectPurpose, step: UpdateStep, timeout: Duration? = nil) async throws(TransferError) -> any Link {
        do { return try await context.connector.connect(for: purpose, timeout: timeout ?? context.timeouts.connect) } catch {
            throw TransferError(.linkLost, step: step, "cannot reach \(context.connector.description): \(error)")
        }
    }

    private func version(on link: any Link, step: UpdateStep) async throws(TransferError) -> String {
        try await request(.versionRequest, on: link, step: step) { if case .version(let text) = $0 { text } else { nil } }
    }

    /// Sends `message` and waits for the answer `match` recognises, trying again a few times.
    private func request<T: Sendable>(
        _ message: AcmeMessage, on link: any Link, step: UpdateStep, timeout: Duration? = nil,
        match: @escaping @Sendable (AcmeMessage) -> T?
    ) async throws(TransferError) -> T {
        let limit = timeout ?? context.timeouts.response
        for _ in 0..<max(1, context.timeouts.attempts) {
            do {
                try await link.send(message.encode())
                return try await withDeadline(limit, clock: context.clock) { () async throws -> T in
                    while true {
                        // A closed link ends the wait (it throws); only a damaged packet is skipped.
                        let packet = try await link.receive()
                        if let decoded = try? AcmeMessage(decoding: packet), let value = match(decoded) { return value }
                    }
                }
            } catch is DeadlineExceeded {
                continue
            } catch {
                throw TransferError(.linkLost, step: step, "\(error)")
            }
        }
        throw TransferError(.timeout, step: step, "no answer from the device: check it is powered and in range")
    }
}
