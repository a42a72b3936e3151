import BleotaCodec
import BleotaEngine
import BleotaLink

/// The host half of ACME OTA: connect → read the version → START → the image
/// through bleota's transfer engine → END (the device checks the CRC-32) →
/// the device activates and reboots → reconnect → check the version. The
/// sequence is bleota's lifecycle (``UpdateStateMachine/run(_:)``); this host
/// gives it the I/O of each step, and steps, progress and the report go through
/// bleota's shared ``OperationRecorder``.
public struct AcmeHost: ProtocolHost {
    public let context: HostContext
    public init(context: HostContext) { self.context = context }

    public func flash(_ image: PreparedImage, mode: FlashMode) async throws(TransferError) -> UpdateReport {
        // The application takes the image itself: there is no bootloader to enter.
        var machine = UpdateStateMachine(expectedVersion: image.version, applicationReceives: true)
        var steps = FlashSteps(host: self, image: image)
        return try await machine.run(&steps)
    }

    /// The update's steps: the I/O of each, which bleota's lifecycle orders (and probes what runs
    /// after a failure late in the update).
    struct FlashSteps: RecordedLifecycleSteps {
        let host: AcmeHost
        let image: PreparedImage
        var recorder: OperationRecorder
        /// One: the transfer engine resends what was lost itself.
        var tries = UpdateTries(limit: 1)
        var link: (any Link)?
        var summary: TransferSummary?
        var statistics = TransferStatistics()
        var chunk = 0

        init(host: AcmeHost, image: PreparedImage) {
            self.host = host
            self.image = image
            recorder = host.context.recorder("flash")
        }

        var context: HostContext { host.context }

        mutating func connect() async throws(TransferError) -> DeviceMode {
            let link = try await context.connect(.initial, step: .connect)
            self.link = link
            recorder.versionBefore = try await host.version(on: link, step: .connect)
            return .application
        }

        mutating func transfer() async throws(TryFailure) {
            do throws(TransferError) { try await send() } catch { throw .final(error) }
        }

        mutating func send() async throws(TransferError) {
            let link = link!
            let bytes = image.bytes
            chunk = min(context.tuning.packetSize ?? .max, link.parameters.maximumPayload - AcmeWire().dataOverhead)
            guard chunk >= 1 else { throw TransferError(.deviceRefused, step: .transfer, "the link is too small for data packets") }
            let start = AcmeMessage.start(
                length: UInt32(bytes.count), crc32: CRC32.checksum(bytes), chunk: UInt16(clamping: chunk),
                version: image.version)
            let accepted = try await context.request(AcmeRequest.Start(message: start), on: link, step: .transfer)
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
            summary = TransferSummary(streamBytes: bytes.count, packetSize: chunk, elapsed: context.clock.now - began)
            statistics = engine.statistics
            statistics.packetsSent = max(statistics.packetsSent, engine.packetCount)
        }

        /// END: the device checks the CRC-32 the START announced.
        mutating func verify() async throws(TryFailure) -> (ok: Bool, detail: String) {
            do throws(TransferError) {
                let policy = RequestPolicy(timeout: context.timeouts.verify, attempts: context.timeouts.attempts)
                let verdict = try await context.request(AcmeRequest.End(), on: link!, step: .verify, policy: policy)
                return (verdict == .done, "\(verdict)")
            } catch { throw .final(error) }
        }

        /// The device activates the verified image when the host leaves, and reboots into it.
        mutating func activate() async throws(TransferError) -> Bool {
            await link?.close()
            link = nil
            return true
        }

        mutating func reconnect(expecting mode: DeviceMode) async throws(TransferError) -> DeviceMode {
            link = try await context.reconnect(after: nil, expecting: .application)
            return .application
        }

        mutating func runningVersion() async throws(TransferError) -> String? {
            let running = try await host.version(on: link!, step: .confirm)
            recorder.versionAfter = running
            return running
        }

        /// After a failure once the device may have activated: what it runs now.
        mutating func probe() async -> UpdateStateMachine.DeviceReport? {
            await link?.close()
            link = nil
            guard let back = try? await context.connect(.application, step: .confirm) else { return nil }
            defer { link = back }
            guard let version = try? await host.version(on: back, step: .confirm) else { return nil }
            recorder.versionAfter = version
            return UpdateStateMachine.DeviceReport(mode: .application, version: version)
        }

        mutating func finish() async -> UpdateReport {
            await link?.close()
            var tuning = context.tuning
            tuning.packetSize = chunk
            return recorder.finish(bytes: image.bytes.count, transfer: summary, statistics: statistics, tuning: tuning)
        }
    }

    func version(on link: any Link, step: UpdateStep) async throws(TransferError) -> String {
        try await context.request(AcmeRequest.Version(), on: link, step: step)
    }
}
