import BleotaCodec
import BleotaEngine
import BleotaFleet
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import Foundation
import Logging
import Synchronization

// bleota's benchmark: figures, not pass/fail. Prints a table and writes JSON
// (default `.build/bench.json`, or `--json PATH`). Targets are printed beside
// each figure for the reader. Run it in release mode:
//
//     swift run -c release bleota-bench
//
// `--only GROUP,…` (native, smp, nordic, protocols, tune, pacing, fleet, engine, memory, delta) and `--preset NAME,…`
// run part of it; `--fixed-pacing` measures the native figures with closed-loop
// pacing off; `--trace sim://…` prints one flash acknowledgement by acknowledgement.
// `--memory-probe FILE` is used internally: the benchmark re-runs itself in a
// child process to measure the peak memory of sending one large image.

struct Figure: Codable {
    var group: String
    var name: String
    var value: Double
    var unit: String
    var target: String?
}

final class FigureLog: @unchecked Sendable {
    var figures: [Figure] = []
}
let log = FigureLog()

func record(_ group: String, _ name: String, _ value: Double, _ unit: String, target: String? = nil) {
    log.figures.append(Figure(group: group, name: name, value: value, unit: unit, target: target))
    let shown = value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
    print(
        name.padding(toLength: 58, withPad: " ", startingAt: 0) + String(repeating: " ", count: max(0, 10 - shown.count)) + shown
            + " " + unit.padding(toLength: 8, withPad: " ", startingAt: 0) + (target ?? ""))
}

func pseudoRandom(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
    var random = SeededRandom(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    var index = 0
    while index < count {
        var word = random.next()
        for _ in 0..<8 where index < count {
            bytes[index] = UInt8(truncatingIfNeeded: word)
            word >>= 8
            index += 1
        }
    }
    return bytes
}

func wallSeconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func peakResidentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        let kilobytes = line.split(separator: " ").compactMap { Int($0) }.first ?? 0
        return kilobytes * 1024
    }
    return 0
}

/// A receiver that acknowledges like a device but keeps nothing: the memory
/// probe measures the host, not a simulated device's flash.
func discardingReceiver(_ link: LoopbackLink, packets: Int, ackInterval: Int) async {
    var window = ReceiverWindow(packetCount: packets)
    let wire = NativeWire()
    while !window.isComplete {
        guard let packet = try? await link.receive() else { return }
        switch wire.decodeTransferPacket(packet) {
        case .data(let sequence, _, true):
            _ = window.receive(sequence: sequence)
            if window.sinceAcknowledgement >= ackInterval || window.isComplete {
                let ack = window.acknowledgement()
                try? await link.send(wire.encodeAcknowledgement(nextExpected: ack.nextExpected, bitmap: ack.bitmap))
            }
        case .ackRequest:
            let ack = window.acknowledgement()
            try? await link.send(wire.encodeAcknowledgement(nextExpected: ack.nextExpected, bitmap: ack.bitmap))
        default:
            continue
        }
    }
}

/// Sends `stream` over loopback with 244-byte packets; returns seconds.
func sendOverLoopback(_ stream: any ByteSource, packetSize: Int = 244) async throws -> Double {
    let (host, device) = LoopbackLink.pair(maximumPayload: packetSize + NativeMessage.dataHeaderSize)
    let tuning = TransferTuning(window: 64, ackInterval: 16)
    let packets = (stream.count + packetSize - 1) / packetSize
    let receiver = Task { await discardingReceiver(device, packets: packets, ackInterval: tuning.effectiveAckInterval) }
    let engine = TransferEngine(source: stream, packetSize: packetSize, wire: NativeWire(), tuning: tuning, clock: SystemClock())
    let start = DispatchTime.now().uptimeNanoseconds
    try await engine.run(over: host)
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    await receiver.value
    await host.close()
    return seconds
}

/// bleota's native device half on the simulator, with the link model's buffer and packet size.
func nativeDevice(_ storage: DeviceStorage, _ model: LinkModel) -> SimulatedDevice {
    SimulatedDevice(
        address: "C0:FF:EE:00:00:01",
        half: NativeDevice(name: "bleota-sim", storage: storage, bufferCount: model.deviceBuffer, maximumPacket: model.maximumPayload),
        model: model)
}

/// One simulated flash; returns goodput (image bytes per second of transfer time).
func simulatedFlash(
    _ address: String, image: [UInt8], tuning: TransferTuning = defaultTuning,
    trace: Bool = false
) async throws -> (goodput: Double, capacity: Double, resent: Int) {
    let parsed = try SimulatorAddress(parsing: address)
    let report = try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        let storage = DeviceStorage(activeImage: [0], activeVersion: "1", slotSize: max(parsed.slotSize, image.count))
        await world.add(nativeDevice(storage, parsed.model))
        let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
        let onEvent: @Sendable (UpdateEvent) -> Void = { event in
            guard trace, case .progress(let progress) = event else { return }
            print(
                String(
                    format: "%8.3f s %8d B window %3d gap %6.2f ms sent %5d lost %4d", progress.elapsed.seconds, progress.bytesAcknowledged,
                    progress.window, progress.interPacketDelay.seconds * 1000, progress.packetsSent, progress.packetsLost))
        }
        if trace && arguments.contains("--trace-packets") { world.startTrace() }
        var logger = Logger(label: "bleota.bench")
        logger.logLevel = trace ? (arguments.contains("--trace-engine") ? .trace : .debug) : .info
        let report = try await NativeUpdater(connector: connector, clock: world.clock, tuning: tuning, logger: logger, onEvent: onEvent).flash(image: image, version: "2")
        if trace {
            let statistics = world.statistics
            for line in world.trace { print(line) }
            print(
                "link: \(statistics.packetsToDevice) to device, \(statistics.droppedByDeviceBuffer) dropped by its full buffer, \(statistics.lostToDevice) lost on air, \(statistics.packetsToHost) to host"
            )
        }
        return report
    }
    // The link's capacity for the largest writes it carries: protocol headers count against us.
    let capacity = parsed.model.linkCapacity
    return (report.goodput, capacity, report.statistics.packetsResent)
}

/// One simulated SMP upgrade (upload-only, so the figure is the transfer); nil when it failed.
func simulatedSMPUpload(
    _ address: String, image: [UInt8], prepared: PreparedImage? = nil, window: Int?, trace: Bool = false
) async throws -> (goodput: Double, capacity: Double, note: String?) {
    let prepared = prepared ?? PreparedImage(bytes: image, version: "", summary: "")
    let parsed = try SimulatorAddress(parsing: address)
    let outcome: Result<UpdateReport, TransferError> = try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        var configuration = try Simulation.configuration(parsed, for: SMPProtocol())
        configuration.slotSize = 4 << 20
        let device = try SMPProtocol().makeDevice(configuration)
        await world.add(SimulatedDevice(address: "C0:FF:EE:00:00:01", half: device, model: parsed.model))
        let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
        do throws(TransferError) {
            var logger = Logger(label: "bleota.bench")
            logger.logLevel = trace ? .trace : .info
            let onEvent: @Sendable (UpdateEvent) -> Void = { event in
                guard trace else { return }
                switch event {
                case .progress(let progress):
                    print(
                        String(
                            format: "%8.3f s %8d B window %2d requests %5d losses %4d", progress.elapsed.seconds, progress.bytesAcknowledged,
                            progress.window, progress.packetsSent, progress.packetsLost))
                case .note(let note): print("note: \(note)")
                default: break
                }
            }
            return .success(
                try await SMPUpdater(connector: connector, clock: world.clock, window: window, logger: logger, onEvent: onEvent)
                    .flash(prepared, mode: .upload))
        } catch {
            return .failure(error)
        }
    }
    let capacity = parsed.model.linkCapacity
    switch outcome {
    case .success(let report): return (report.goodput, capacity, nil)
    case .failure(let error): return (0, capacity, error.message)
    }
}

/// The share of each write that is payload: the native protocol spends 5 bytes per DATA packet, 1 with compact headers.
func payloadShare(_ address: String) throws -> Double {
    let model = try SimulatorAddress(parsing: address).model
    let header = model.maximumPayload <= NativeUpdater.compactDataLinkPayload ? NativeMessage.CompactData.headerSize : NativeMessage.dataHeaderSize
    return Double(model.maximumPayload - header) / Double(model.maximumPayload)
}

let arguments = CommandLine.arguments
/// `--fixed-pacing`: the native figures with closed-loop pacing off (the old default), for comparison.
let defaultTuning: TransferTuning = {
    var tuning = TransferTuning()
    if arguments.contains("--fixed-pacing") { tuning.adaptive = false }
    return tuning
}()

if let index = arguments.firstIndex(of: "--trace"), arguments.indices.contains(index + 1) {
    // One simulated flash of 256 KiB with a progress line per acknowledgement and the engine's debug
    // log (for studying pacing); --trace-packets adds every packet on the link, --trace-engine the engine's trace log.
    let result = try await simulatedFlash(arguments[index + 1], image: pseudoRandom(256 << 10), trace: true)
    print(String(format: "goodput %.2f KiB/s, %.1f %% of capacity, %d resent", result.goodput / 1024, result.goodput / result.capacity * 100, result.resent))
    exit(0)
}

if let index = arguments.firstIndex(of: "--trace-smp"), arguments.indices.contains(index + 1) {
    // One simulated SMP upload of a 256 KiB MCUboot image, answer by answer.
    let traced = MCUbootImage.build(firmware: pseudoRandom(256 << 10, seed: 9), version: .init(major: 2, minor: 0, revision: 0, build: 0))
    let result = try await simulatedSMPUpload(arguments[index + 1], image: traced, window: nil, trace: true)
    print(
        String(
            format: "goodput %.2f KiB/s, %.1f %% of capacity%@", result.goodput / 1024, result.goodput / result.capacity * 100,
            result.note.map { ", failed: \($0)" } ?? ""))
    exit(0)
}

if let index = arguments.firstIndex(of: "--trace-protocol"), arguments.indices.contains(index + 2) {
    // One simulated flash of a 200 KiB image in a vendor protocol (`--trace-protocol espressif-ota
    // sim://slow-flash?protocol=espressif-ota`), progress by progress, with the host's debug log;
    // --trace-packets adds every packet on the link.
    let name = arguments[index + 1]
    let result: (goodput: Double, capacity: Double, note: String?)
    if name == NordicSecureDFUProtocol.name || name == NordicLegacyDFUProtocol.name {
        result = try await simulatedNordicFlash(
            arguments[index + 2], image: pseudoRandom(200 << 10, seed: 33), legacy: name == NordicLegacyDFUProtocol.name, trace: true)
    } else {
        let image = try benchmarkImage(for: name, bodyBytes: 200 << 10, seed: 33)
        result = try await simulatedProtocolFlash(arguments[index + 2], protocolName: name, image: image, trace: true)
    }
    print(
        String(
            format: "goodput %.2f KiB/s, %.1f %% of capacity%@", result.goodput / 1024, result.goodput / result.capacity * 100,
            result.note.map { ", failed: \($0)" } ?? ""))
    exit(0)
}

if arguments.contains("--engine-only") {
    // Just the engine over loopback (for profiling).
    let stream = pseudoRandom(16 << 20)
    let seconds = try await sendOverLoopback(stream)
    print(String(format: "engine over in-memory loopback: %.1f MB/s", Double(stream.count) / seconds / 1e6))
    exit(0)
}

if let index = arguments.firstIndex(of: "--memory-probe"), arguments.indices.contains(index + 1) {
    // Child process: hash the image file in one pass and send it from the file, as
    // `flash` does with a large .bin; print peak RSS.
    let source = try FileByteSource(path: arguments[index + 1])
    _ = try source.digests()
    _ = try await sendOverLoopback(source)
    print(peakResidentBytes())
    exit(0)
}

/// A 1 MiB image pair a release apart: bytes over 64 values (as dense as code), ten changed, 100 inserted.
func deltaPair() -> (old: [UInt8], new: [UInt8]) {
    let old = pseudoRandom(1 << 20, seed: 32).map { $0 & 0x3F }
    var new = old
    var random = SeededRandom(seed: 33)
    for _ in 0..<10 { new[Int(random.next() % UInt64(new.count))] &+= 1 }
    new.insert(contentsOf: pseudoRandom(100, seed: 34), at: 500_000)
    return (old, new)
}

if arguments.contains("--delta-probe") {
    // Child process: diff the pair alone, so its peak memory is the diff's; print seconds, peak RSS, patch size.
    let (old, new) = deltaPair()
    let started = DispatchTime.now().uptimeNanoseconds
    let patch = DeltaPatch.create(from: old, to: new)
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
    print("\(seconds) \(peakResidentBytes()) \(patch.count)")
    exit(0)
}

/// `--only GROUP[,GROUP…]` (native, smp, tune, engine, memory, delta) and `--preset NAME[,NAME…]` run part of the benchmark.
func listArgument(_ name: String) -> Set<String>? {
    guard let index = arguments.firstIndex(of: name), arguments.indices.contains(index + 1) else { return nil }
    return Set(arguments[index + 1].split(separator: ",").map(String.init))
}
let onlyGroups = listArgument("--only")
let onlyPresets = listArgument("--preset")
func runs(_ group: String) -> Bool { onlyGroups?.contains(group) ?? true }
let presets = LinkPreset.all.filter { onlyPresets?.contains($0.name) ?? true }

let jsonPath = arguments.firstIndex(of: "--json").flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil } ?? ".build/bench.json"
let cpu =
    (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
    .split(separator: "\n").first { $0.hasPrefix("model name") }?.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "unknown CPU"
print("bleota benchmark — \(cpu), \(ProcessInfo.processInfo.processorCount) cores, \(ProcessInfo.processInfo.operatingSystemVersionString)")

// 1. Native protocol on every simulator preset, at 0 %, 1 % and 5 % random loss.
let image = pseudoRandom(1 << 20)
if runs("native") {
    print("\n== native protocol on the simulator (1 MiB image, default tuning; efficiency = goodput / link capacity for MTU−3-byte writes)")
    for preset in presets {
        for loss in [0.0, 0.01, 0.05] {
            let address = "sim://\(preset.name)?loss=\(loss)&seed=1"
            let result = try await simulatedFlash(address, image: preset.name == "1m-no-dle-30ms" ? Array(image.prefix(256 << 10)) : image)
            let efficiency = result.goodput / result.capacity
            let share = try payloadShare(address)
            let target =
                preset.name == "slow-flash"
                ? "device-bound (see tune)"
                : loss == 0 ? "≥ 90 %" : String(format: "≥ %.0f %%", 80 * (1 - loss))
            record("native", "\(preset.name) loss \(Int(loss * 100)) %: goodput", result.goodput / 1024, "KiB/s")
            record("native", "\(preset.name) loss \(Int(loss * 100)) %: capacity", result.capacity / 1024, "KiB/s")
            record("native", "\(preset.name) loss \(Int(loss * 100)) %: efficiency", efficiency * 100, "%")
            // The same, against what the link could carry as payload in the packets sent (headers excluded).
            record("native", "\(preset.name) loss \(Int(loss * 100)) %: efficiency of the packets sent", efficiency / share * 100, "%", target: target)
        }
    }

}

// 1b. MCUmgr/SMP on the same presets: one request at a time, and the pipelined window (buffer count − 1).
if runs("smp") {
    print("\n== SMP on the simulator (512 KiB MCUboot image, upload; buffer 2475 × 4; efficiency = goodput / link capacity)")
    let smpImage = MCUbootImage.build(firmware: pseudoRandom(512 << 10, seed: 9), version: .init(major: 2, minor: 0, revision: 0, build: 0))
    for preset in presets {
        for loss in [0.0, 0.01, 0.05] {
            let address = "sim://\(preset.name)?protocol=smp&loss=\(loss)&seed=1"
            let sized =
                preset.name == "1m-no-dle-30ms"
                ? MCUbootImage.build(firmware: pseudoRandom(128 << 10, seed: 9), version: .init(major: 2, minor: 0, revision: 0, build: 0)) : smpImage
            for (label, window) in [("window 1", Optional(1)), ("pipelined", nil)] {
                let result = try await simulatedSMPUpload(address, image: sized, window: window)
                let name = "\(preset.name) loss \(Int(loss * 100)) % \(label)"
                if let note = result.note {
                    print("  \(name): failed — \(note)")
                    record("smp", "\(name): efficiency", 0, "%")
                    continue
                }
                let target = (label == "pipelined" && loss == 0 && preset.name != "slow-flash") ? "≥ 80 %" : nil
                record("smp", "\(name): goodput", result.goodput / 1024, "KiB/s")
                record("smp", "\(name): efficiency", result.goodput / result.capacity * 100, "%", target: target)
            }
        }
    }
    // Two images in one update, as an nRF5340's package has them (application about 250 KiB,
    // network core about 175 KiB): the share of SMP's ceiling summed over both uploads.
    if presets.contains(where: { $0.name == "2m-dle" }), let preset = presets.first(where: { $0.name == "2m-dle" }) {
        let version = MCUbootImage.Version(major: 2, minor: 0, revision: 0, build: 0)
        let application = MCUbootImage.build(firmware: pseudoRandom(250 << 10, seed: 11), version: version)
        let network = MCUbootImage.build(firmware: pseudoRandom(175 << 10, seed: 12), version: version)
        let prepared = PreparedImage(
            parts: [
                PreparedImage.Part(name: "image 0", data: application, attributes: [SMPProtocol.imageNumberAttribute: 0]),
                PreparedImage.Part(name: "image 1", data: network, attributes: [SMPProtocol.imageNumberAttribute: 1]),
            ], version: version.description, summary: "two images")
        let result = try await simulatedSMPUpload("sim://2m-dle?protocol=smp&images=2&seed=1", image: [], prepared: prepared, window: nil)
        let wire = WireCeiling(model: preset.model)
        let total = Double(application.count + network.count)
        let ceiling = total / (Double(application.count) / wire.smpUpload(imageBytes: application.count) + Double(network.count) / wire.smpUpload(imageBytes: network.count))
        if let note = result.note { print("  two images: failed — \(note)") }
        record("smp", "2m-dle two images (250 + 175 KiB): goodput", result.goodput / 1024, "KiB/s")
        record("smp", "2m-dle two images (250 + 175 KiB): of SMP's ceiling", result.goodput / ceiling * 100, "%", target: "≥ 90 %")
    }

}

// 1b'. Nordic's Secure DFU and legacy DFU on the same presets: the "before" of issue 33's table.
/// One simulated Nordic update of an application part (Secure DFU, or legacy DFU); the goodput
/// over the transfer, and the failure's message when it failed.
func simulatedNordicFlash(
    _ address: String, image: [UInt8], legacy: Bool, trace: Bool = false
) async throws -> (
    goodput: Double, capacity: Double, note: String?
) {
    let parsed = try SimulatorAddress(parsing: address)
    let metadata =
        legacy
        ? NordicLegacyInitPacket(applicationVersion: 2, softDeviceRequirements: [0x00B6], imageCRC: NordicLegacyInitPacket.crc(of: image)).encode()
        : NordicInitPacket(
            firmwareVersion: 2, hardwareVersion: 52, softDeviceRequirements: [0x0101], type: .application,
            applicationSize: UInt32(image.count), hash: SHA256Digest.hash(image)
        ).encode()
    let prepared = PreparedImage(parts: [.init(name: "application", data: image, metadata: metadata)], version: "2", summary: "bench")
    let outcome: Result<UpdateReport, TransferError> = try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        let half: any DeviceHalf =
            if legacy { NordicLegacyDFUDevice(flash: NordicLegacyBootloader.Flash()) } else {
                NordicSecureDFUDevice(flash: NordicBootloader.Flash(), buttonless: .unbonded)
            }
        await world.add(
            SimulatedDevice(
                address: "C0:FF:EE:00:00:01", half: half, model: parsed.model,
                speaking: legacy ? NordicLegacyDFUProtocol() as any UpdateProtocol : NordicSecureDFUProtocol()))
        let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
        if trace && arguments.contains("--trace-packets") { world.startTrace() }
        defer { for line in world.trace { print(line) } }
        let context = HostContext(
            protocolName: legacy ? NordicLegacyDFUProtocol.name : NordicSecureDFUProtocol.name, connector: connector, clock: world.clock,
            logger: benchLogger(trace: trace), onEvent: tracePrinter(world.clock, enabled: trace))
        do throws(TransferError) {
            let report: UpdateReport
            if legacy {
                report = try await NordicLegacyDFUUpdater(context: context).flash(prepared, mode: .confirm)
            } else {
                report = try await NordicSecureDFUUpdater(context: context).flash(prepared, mode: .confirm)
            }
            await world.shutDown()
            return .success(report)
        } catch {
            await world.shutDown()
            return .failure(error)
        }
    }
    let capacity = parsed.model.linkCapacity
    switch outcome {
    case .success(let report): return (report.goodput, capacity, nil)
    case .failure(let error): return (0, capacity, error.message)
    }
}

if runs("nordic") {
    print("\n== Nordic DFU on the simulator (200 KiB application, default options; efficiency = goodput / link capacity)")
    let nordicImage = pseudoRandom(200 << 10, seed: 33)
    for preset in presets {
        for loss in [0.0, 0.01] {
            for (name, legacy) in [("nordic-dfu", false), ("nordic-legacy", true)] {
                let address = "sim://\(preset.name)?protocol=\(name)&loss=\(loss)&seed=1"
                let sized = preset.name == "1m-no-dle-30ms" ? Array(nordicImage.prefix(32 << 10)) : nordicImage
                let result = try await simulatedNordicFlash(address, image: sized, legacy: legacy)
                let label = "\(name) \(preset.name) loss \(Int(loss * 100)) %"
                if let note = result.note {
                    print("  \(label): failed — \(note)")
                    record("nordic", "\(label): efficiency", 0, "%")
                    continue
                }
                record("nordic", "\(label): goodput", result.goodput / 1024, "KiB/s")
                record("nordic", "\(label): efficiency", result.goodput / result.capacity * 100, "%")
                // What the wire allows (protocols/nordic-dfu.md and nordic-legacy-dfu.md, "What the wire allows").
                let wire = WireCeiling(model: preset.model)
                let waiting = legacy ? wire.nordicLegacyDFU(imageBytes: sized.count, pipelined: false) : wire.nordicSecureDFU(imageBytes: sized.count, pipelined: false)
                let ceiling = legacy ? wire.nordicLegacyDFU(imageBytes: sized.count, pipelined: true) : wire.nordicSecureDFU(imageBytes: sized.count, pipelined: true)
                if loss == 0 {
                    record("nordic", "\(name) \(preset.name): ceiling, waiting for every answer", waiting / 1024, "KiB/s")
                    record("nordic", "\(name) \(preset.name): ceiling, requests ahead of their answers", ceiling / 1024, "KiB/s")
                }
                record("nordic", "\(label): share of the ceiling", result.goodput / ceiling * 100, "%")
            }
        }
    }
}

// 1d. Every protocol on every preset (issue 33's table): goodput, its share of the link's capacity and
// of what the protocol's wire allows (protocols/*.md, "What the wire allows"). `--markdown` prints it
// as the table docs/performance.md holds (scripts/protocol-table regenerates it there).
struct ProtocolRow {
    var protocolName: String
    var preset: String
    var loss: Double
    var goodput: Double
    var capacity: Double
    var ceiling: Double?
    var note: String?
}

/// The protocols of the table, in the order `bleota protocols` lists them, the described ones last.
let tableProtocols = [
    "bleota", "smp", "nordic-dfu", "nordic-legacy", "espressif-ota", "suota", "ti-oad", "silabs-ota", "stm32wb-ota", "telink-ota",
]

/// One protocol on one preset at one loss: what its host reaches and what its wire allows.
func protocolRow(_ name: String, preset: LinkPreset, loss: Double) async throws -> ProtocolRow {
    let size = preset.name == "1m-no-dle-30ms" ? 32 << 10 : 200 << 10
    let wire = WireCeiling(model: preset.model)
    let plain = "sim://\(preset.name)?loss=\(loss)&seed=1"
    let result: (goodput: Double, capacity: Double, note: String?)
    let ceiling: Double?
    switch name {
    case "bleota":
        let flashed = try await simulatedFlash(plain, image: pseudoRandom(size, seed: 33))
        result = (flashed.goodput, flashed.capacity, nil)
        ceiling = wire.native(imageBytes: size)
    case SMPProtocol.name:
        let image = MCUbootImage.build(firmware: pseudoRandom(size, seed: 33), version: .init(major: 2, minor: 0, revision: 0, build: 0))
        result = try await simulatedSMPUpload(plain, image: image, window: nil)
        ceiling = wire.smpUpload(imageBytes: image.count)
    case NordicSecureDFUProtocol.name, NordicLegacyDFUProtocol.name:
        let legacy = name == NordicLegacyDFUProtocol.name
        result = try await simulatedNordicFlash(
            "sim://\(preset.name)?protocol=\(name)&loss=\(loss)&seed=1", image: pseudoRandom(size, seed: 33), legacy: legacy)
        ceiling = legacy ? wire.nordicLegacyDFU(imageBytes: size, pipelined: true) : wire.nordicSecureDFU(imageBytes: size, pipelined: true)
    default:
        let image = try benchmarkImage(for: name, bodyBytes: size, seed: 33)
        result = try await simulatedProtocolFlash("sim://\(preset.name)?protocol=\(name)&loss=\(loss)&seed=1", protocolName: name, image: image)
        switch name {
        case EspressifOTAProtocol.name: ceiling = wire.espressifOTA(imageBytes: image.count)
        case SUOTAProtocol.name: ceiling = wire.suota(imageBytes: image.count)
        case TIOADProtocol.name: ceiling = wire.tiOAD(imageBytes: image.count)
        case SiliconLabsOTAProtocol.name: ceiling = wire.silabsOTA(imageBytes: image.count)
        default:
            // What the wire allows is the best schedule the device survives: as described, reads
            // every n packets, or packets spaced to the device's work.
            let described = try benchmarkProtocol(named: name).updateProtocol as? DescribedProtocol
            let pacings: [DescribedPacing] = [.asDescribed, .spacedToTheDevice] + [1, 2, 4, 8, 16, 32].map { .readEvery($0) }
            ceiling = described.flatMap { described in pacings.compactMap { wire.described(described.description, imageBytes: image.count, pacing: $0) }.max() }
        }
    }
    return ProtocolRow(
        protocolName: name, preset: preset.name, loss: loss, goodput: result.goodput, capacity: result.capacity, ceiling: ceiling,
        note: result.note)
}

if runs("protocols") {
    print("\n== every protocol on the simulator (200 KiB, 32 KiB on 1m-no-dle-30ms; default options; share of the link's capacity and of the protocol's ceiling)")
    var rows: [ProtocolRow] = []
    for name in tableProtocols {
        for preset in presets {
            for loss in [0.0, 0.01] {
                let row = try await protocolRow(name, preset: preset, loss: loss)
                rows.append(row)
                let label = "\(name) \(preset.name) loss \(Int(loss * 100)) %"
                if let note = row.note {
                    print("  \(label): failed — \(note)")
                    record("protocols", "\(label): goodput", 0, "KiB/s")
                    continue
                }
                record("protocols", "\(label): goodput", row.goodput / 1024, "KiB/s")
                record("protocols", "\(label): share of the link", row.goodput / row.capacity * 100, "%")
                if let ceiling = row.ceiling {
                    if loss == 0 { record("protocols", "\(name) \(preset.name): ceiling", ceiling / 1024, "KiB/s") }
                    let target = preset.name == "slow-flash" ? "≥ 80 %" : "≥ 90 %"
                    record("protocols", "\(label): share of the ceiling", row.goodput / ceiling * 100, "%", target: loss == 0 ? target : nil)
                }
            }
        }
    }
    if arguments.contains("--markdown") {
        func kib(_ value: Double) -> String {
            let kib = value / 1024
            return kib >= 100 ? String(format: "%.0f", kib) : kib >= 10 ? String(format: "%.1f", kib) : String(format: "%.2f", kib)
        }
        func cell(_ row: ProtocolRow?) -> String {
            guard let row else { return "" }
            guard row.note == nil else { return "failed" }
            let link = String(format: "%.0f %%", row.goodput / row.capacity * 100)
            let ofCeiling = row.ceiling.map { String(format: ", %.0f %%", row.goodput / $0 * 100) } ?? ""
            return "\(kib(row.goodput)) (\(link)\(ofCeiling))"
        }
        print("\n| Protocol | Preset | Ceiling KiB/s | 0 % loss: KiB/s (of link, of ceiling) | 1 % loss: KiB/s (of link, of ceiling) |")
        print("|---|---|---|---|---|")
        for name in tableProtocols {
            for preset in presets {
                let clean = rows.first { $0.protocolName == name && $0.preset == preset.name && $0.loss == 0 }
                let lossy = rows.first { $0.protocolName == name && $0.preset == preset.name && $0.loss > 0 }
                let ceiling = clean?.ceiling.map(kib) ?? "—"
                print("| \(name) | `\(preset.name)` | \(ceiling) | \(cell(clean)) | \(cell(lossy)) |")
            }
        }
    }
}

// 1c. Tune quality: the search's choice against the full grid's best, on fresh simulated devices.
if runs("tune") { print("\n== tune (32 KiB test transfers; search vs the full grid)") }
func tuneTrial(_ address: String, _ point: TuningPoint) async -> TuningTrial {
    do {
        let parsed = try SimulatorAddress(parsing: address)
        var trialTuning = point.apply(to: TransferTuning())
        trialTuning.compression = .off
        trialTuning.adaptive = false
        let tuning = trialTuning
        let report = try await SimulationRuntime.run { runtime in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
            await world.add(nativeDevice(DeviceStorage(activeImage: [0], activeVersion: "1", slotSize: 1 << 20), parsed.model))
            let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
            return try await NativeUpdater(connector: connector, clock: world.clock, tuning: tuning).testTransfer(pseudoRandom(32 << 10, seed: 5))
        }
        let statistics = report.statistics
        return TuningTrial(
            point: point, goodput: report.goodput,
            loss: statistics.packetsSent > 0 ? Double(statistics.packetsLost) / Double(statistics.packetsSent) : 0,
            packetsSent: statistics.packetsSent, packetsResent: statistics.packetsResent)
    } catch {
        return TuningTrial(point: point, goodput: 0, loss: 1, packetsSent: 0, packetsResent: 0, failure: "\(error)")
    }
}
for preset in ["slow-flash", "1m-dle-7.5ms", "2m-dle"] where runs("tune") && (onlyPresets?.contains(preset) ?? true) {
    let address = "sim://\(preset)?seed=2"
    let largest = try SimulatorAddress(parsing: address).model.maximumPayload - NativeMessage.dataHeaderSize
    let space = TuningSpace.standard(maximumPacket: largest)
    let start = TuningPoint(packetSize: largest, window: TransferTuning().window, delay: .zero)
    let searched = await TuningSearch.search(space, from: start) { await tuneTrial(address, $0) }
    let grid = await TuningSearch.grid(space) { await tuneTrial(address, $0) }
    let pick = searched.max { $0.score < $1.score }!
    let best = grid.max { $0.score < $1.score }!
    let reference = searched[0]
    record("tune", "\(preset): search pick / grid best goodput", pick.score / best.score * 100, "%", target: "≥ 95 %")
    record("tune", "\(preset): trials, search / grid", Double(searched.count) / Double(grid.count) * 100, "%", target: "≤ 25 %")
    record("tune", "\(preset): pick goodput (loss \(String(format: "%.1f", pick.loss * 100)) %)", pick.goodput / 1024, "KiB/s")
    record("tune", "\(preset): default goodput (loss \(String(format: "%.1f", reference.loss * 100)) %)", reference.goodput / 1024, "KiB/s")
}

// 1d. No tuning needed: default flash against the best fixed setting `tune --grid` finds, and against the device's ceiling.
if runs("pacing") {
    print("\n== closed-loop pacing: default flash vs tune --grid's best fixed setting and the device's ceiling (1 MiB image)")
    for preset in ["slow-flash"] where onlyPresets?.contains(preset) ?? true {
        let address = "sim://\(preset)?seed=2"
        let model = try SimulatorAddress(parsing: address).model
        let largest = model.maximumPayload - NativeMessage.dataHeaderSize
        let grid = await TuningSearch.grid(TuningSpace.standard(maximumPacket: largest)) { await tuneTrial(address, $0) }
        let best = grid.max { $0.score < $1.score }!
        var bestTuning = best.point.apply(to: TransferTuning())
        bestTuning.adaptive = false
        let fixed = try await simulatedFlash(address, image: image, tuning: bestTuning)
        let paced = try await simulatedFlash(address, image: image)
        // The device's ceiling (protocols/link-model.md): a page of S bytes costs its erase E, the
        // processing t of the S/P packets that fill it, and the wait for data after the erase that
        // its B − 1 queued packets do not cover (data comes one connection interval I after it is ready).
        let ceiling = model.deviceCeiling(packetBytes: largest + NativeMessage.dataHeaderSize, headerBytes: NativeMessage.dataHeaderSize) ?? .infinity
        record("pacing", "\(preset): device ceiling", ceiling / 1024, "KiB/s")
        record("pacing", "\(preset): grid's best fixed setting (\(best.point))", fixed.goodput / 1024, "KiB/s")
        record("pacing", "\(preset): default (closed loop)", paced.goodput / 1024, "KiB/s")
        record("pacing", "\(preset): default / grid's best", paced.goodput / fixed.goodput * 100, "%", target: "≥ 90 %")
        record("pacing", "\(preset): default / device ceiling", paced.goodput / ceiling * 100, "%", target: "≥ 80 %")
    }
}

// 1d'. Small packets on a slow device (issue 48, item 6): slow-flash takes 4 packets per 15 ms
// connection event, whatever their size, so small packets are bound by the events, not by the
// device's 2 ms a packet; 5 % duplication puts copies in the same 4 places.
if runs("small-packets") {
    print("\n== small packets: slow-flash, 64 KiB, --packet-size 1, 8, 20 and the link's, with and without 5 % duplication")
    let model = LinkPreset.named("slow-flash")!.model
    let header = NativeMessage.dataHeaderSize
    let small = pseudoRandom(64 * 1024, seed: 6)
    for size in [1, 8, 20, nil] as [Int?] {
        var tuning = defaultTuning
        if let size { tuning.packetSize = size }
        let payload = size ?? (model.maximumPayload - header)
        // The ceiling: each 4 KiB page costs its erase, then its packets at the buffer's worth per
        // connection event or at the device's processing, whichever is slower (protocols/link-model.md).
        let page = Double(model.flashPageSize)
        let perEvent = model.connectionInterval.seconds / Double(model.deviceBuffer)
        let eventBound = page / (model.flashEraseTimePerPage.seconds + page / Double(payload) * perEvent)
        let ceiling = min(eventBound, model.deviceCeiling(packetBytes: payload + header, headerBytes: header) ?? .infinity)
        let name = size.map { "--packet-size \($0)" } ?? "the link's packet size"
        record("small-packets", "\(name): ceiling", ceiling, "B/s")
        for duplication in [0.0, 0.05] {
            let run = try await simulatedFlash("sim://slow-flash?seed=1&duplicate=\(duplication)", image: small, tuning: tuning)
            let label = duplication > 0 ? "\(name), 5 % duplicated" : name
            record("small-packets", "\(label): goodput", run.goodput, "B/s")
            record("small-packets", "\(label): share of the ceiling", run.goodput / ceiling * 100, "%", target: duplication > 0 ? "≥ 70 %" : "≥ 80 %")
            record("small-packets", "\(label): packets resent", Double(run.resent), "packets")
        }
    }
}

// 1e. A fleet: many simulated devices over several simulated adapters, each adapter's radio shared by its links.
/// One fleet campaign of `kib`-KiB images; `--fleet-devices`, `--fleet-adapters`, `--fleet-spacing`,
/// `--fleet-fixed` (pacing off) and `--fleet-steps` (time per step and links transferring, per adapter
/// when its last transfer ended) vary it; `--fleet-trace` prints every try's steps.
func fleetBenchmark(kib: Int, connections: Int, transfers: Int) async throws {
    print("\n== fleet: 100 devices over 10 adapters (\(connections) links each, \(transfers) transferring), 5 with faults, \(kib) KiB each, native protocol on 2m-dle")
    let firmwareSize = kib << 10
    let firmware = pseudoRandom(firmwareSize, seed: 77)
    let prepared = PreparedImage(bytes: firmware, version: "2.0.0", summary: "fleet")
    let native = NativeProtocol()
    let deviceCount = listArgument("--fleet-devices").flatMap { $0.first }.flatMap { Int($0) } ?? 100
    // `--fleet-mixed`: every fifth device is far away (1M PHY, 7.5 ms interval: 75 % of 2m-dle's rate), so
    // adapters that draw several of them fall behind; `--fleet-no-moves` keeps queued devices where they are.
    // `--fleet-seed N` shifts every device's seed by N × 1000 (another draw of the same fleet).
    let seedBase = (listArgument("--fleet-seed").flatMap { $0.first }.flatMap { Int($0) } ?? 0) * 1000
    var listed = (1...deviceCount).map {
        arguments.contains("--fleet-mixed") && $0 % 5 == 0 ? "sim://1m-dle-7.5ms?seed=\(seedBase + $0)" : "sim://2m-dle?seed=\(seedBase + $0)"
    }
    // 5 % of the devices meet faults: loss, a dropped link, a power cut.
    for (index, fault) in [
        (9, "&loss=0.05"), (29, "&disconnect-at=100000"), (49, "&power-loss-at=150000"), (69, "&loss=0.02&notify-loss=0.02"),
        (89, "&disconnect-at=50000"),
    ] where index < deviceCount { listed[index] += fault }
    let addresses = listed
    let stepTotals = Mutex<[String: Double]>([:])
    /// Per adapter, how long k of its links were in their transfer step.
    final class TransferOccupancy: Sendable {
        struct Adapter {
            var count = 0
            var since = Duration.zero
            var time: [Int: Duration] = [:]
            var single: [(Duration, Duration)] = []
        }
        let state = Mutex<[String: Adapter]>([:])
        func change(_ adapter: String, by delta: Int, at now: Duration) {
            state.withLock { all in
                var entry = all[adapter] ?? Adapter()
                entry.time[entry.count, default: .zero] += now - entry.since
                if entry.count == 1 && now > entry.since { entry.single.append((entry.since, now)) }
                entry.count += delta
                entry.since = now
                all[adapter] = entry
            }
        }
        /// Where one link transferred alone: at the end of each adapter's run (the other lane had no
        /// device left) or before it.
        func singles() -> String {
            state.withLock { all in
                var (before, atEnd) = (Duration.zero, Duration.zero)
                for entry in all.values {
                    for (from, to) in entry.single {
                        if to == entry.since { atEnd += to - from } else { before += to - from }
                    }
                }
                return String(format: "one link transferring, summed over adapters: at the end %.1f s, before it %.1f s", atEnd.seconds, before.seconds)
            }
        }
        /// Per adapter: when its last transfer ended, and how long one link transferred alone before that.
        func ends() -> String {
            state.withLock { all in
                all.sorted { $0.key < $1.key }.map { name, entry in
                    let tail = entry.single.last.map { $0.1 == entry.since ? ($0.1 - $0.0).seconds : 0 } ?? 0
                    return String(format: "%@ last transfer ends %.1f s, alone %.1f s", name, entry.since.seconds, tail)
                }.joined(separator: "; ")
            }
        }
        func shares() -> String {
            let totals = state.withLock { all in all.values.reduce(into: [Int: Duration]()) { sum, entry in for (k, t) in entry.time { sum[k, default: .zero] += t } } }
            let whole = totals.values.reduce(Duration.zero, +).seconds
            return totals.sorted { $0.key < $1.key }.map { "\($0.key): \(String(format: "%.1f", $0.value.seconds / whole * 100)) %" }.joined(separator: ", ")
        }
    }
    let transferring = TransferOccupancy()
    let adapterNames = (0..<(listArgument("--fleet-adapters").flatMap { $0.first }.flatMap { Int($0) } ?? 10)).map { "sim\($0)" }
    let outcome = try await SimulationRuntime.run(maximumVirtualTime: .seconds(24 * 3600)) { runtime in
        let fleet = SimulatedFleet(runtime: runtime, adapterNames: adapterNames)
        var members: [String: SimulatedFleet.Member] = [:]
        for address in addresses { members[address] = try await fleet.add(try SimulatorAddress(parsing: address), protocol: native, description: address) }
        let known = members
        let runner = FleetRunner(
            devices: addresses.map { FleetDevice(address: $0) },
            options: {
                var options = FleetOptions(
                    adapters: adapterNames, connectionsPerAdapter: connections,
                    transfersPerAdapter: transfers,
                    startSpacing: .milliseconds(listArgument("--fleet-spacing").flatMap { $0.first }.flatMap { Int64($0) } ?? 0))
                options.movesQueuedDevices = !arguments.contains("--fleet-no-moves")
                return options
            }(),
            clock: runtime.clock
        ) { device, adapter, turn, onEvent in
            let member = known[device.address]!
            member.use(adapter: fleet.adapters[adapter])
            // `--fleet-trace`: one line per try, its adapter, start and end, and when each step began.
            let began = runtime.clock.now
            let marks = Mutex<[String]>([])
            defer {
                if arguments.contains("--fleet-trace") {
                    print(
                        String(format: "try %@ %@ %.2f-%.2f s: ", adapter, device.address, began.seconds, runtime.clock.now.seconds)
                            + marks.withLock { $0.joined(separator: " ") })
                }
            }
            let inTransfer = Mutex(false)
            let tracked: @Sendable (UpdateEvent) -> Void = { event in
                if case .step(let step) = event {
                    marks.withLock { $0.append("\(step)@" + String(format: "%.2f", runtime.clock.now.seconds)) }
                    let now = inTransfer.withLock { was in
                        defer { was = step == .transfer }
                        return step == .transfer && !was ? 1 : (step != .transfer && was ? -1 : 0)
                    }
                    if now != 0 { transferring.change(adapter, by: now, at: runtime.clock.now) }
                }
                onEvent(event)
            }
            defer { if inTransfer.withLock({ $0 }) { transferring.change(adapter, by: -1, at: runtime.clock.now) } }
            let host = native.makeHost(
                HostContext(
                    protocolName: "native", connector: member.connector, clock: runtime.clock,
                    tuning: TransferTuning(adaptive: !arguments.contains("--fleet-fixed")), transferTurn: turn,
                    onEvent: tracked))
            do throws(TransferError) {
                let report = try await host.flash(prepared, mode: .testAndConfirm)
                stepTotals.withLock { totals in for (step, seconds) in report.stepSeconds { totals[step, default: 0] += seconds } }
                return .updated(report)
            } catch { return .failed(error) }
        }
        let (results, summary) = await runner.run()
        let extraTries = results.reduce(0) { $0 + max(0, $1.attempts - 1) }
        if extraTries > 0 {
            print("tries beyond the first: \(extraTries) (" + results.filter { $0.attempts > 1 }.map { $0.device }.joined(separator: ", ") + ")")
        }
        for result in results where result.outcome != .updated {
            print("not updated: \(result.device) after \(result.attempts) tries: \(result.error ?? "no error")")
        }
        if arguments.contains("--fleet-steps") {
            print("time with k links in their transfer step, all adapters: " + transferring.shares())
            print(transferring.singles())
            print(transferring.ends())
            print(stepTotals.withLock { $0 }.sorted { $0.key < $1.key }.map { "\($0.key) \(String(format: "%.1f", $0.value / Double(results.count))) s" }.joined(separator: ", "))
        }
        var exact = 0
        for result in results where result.outcome == .updated {
            if (known[result.device]!.half as? NativeDevice)?.storage.snapshot.activeImage == firmware { exact += 1 }
        }
        let air = fleet.adapters.values.reduce(Duration.zero) { $0 + $1.airTime }
        for member in known.values { await member.world.shutDown() }
        return (summary, exact, air)
    }
    let model = try SimulatorAddress(parsing: "sim://2m-dle").model
    let aggregate = model.airCapacity(payload: model.maximumPayload) * Double(adapterNames.count)
    let delivered = Double(outcome.0.updated * firmware.count)
    record("fleet", "\(kib) KiB: devices updated (of 100) / exact image running", Double(outcome.0.updated), "devices", target: "= \(outcome.1) exact")
    record("fleet", "\(kib) KiB: campaign time", outcome.0.seconds, "s")
    record("fleet", "\(kib) KiB: aggregate capacity of 10 adapters (air time)", aggregate / 1024, "KiB/s")
    record("fleet", "\(kib) KiB: delivered", delivered / outcome.0.seconds / 1024, "KiB/s")
    record("fleet", "\(kib) KiB: delivered / aggregate capacity", delivered / outcome.0.seconds / aggregate * 100, "%", target: "≥ 90 %")
    record("fleet", "\(kib) KiB: radio busy (air time / (adapters × campaign time))", outcome.2.seconds / (Double(adapterNames.count) * outcome.0.seconds) * 100, "%")
}

if runs("fleet") {
    let connections = listArgument("--fleet-connections").flatMap { $0.first }.flatMap { Int($0) } ?? FleetOptions.defaultConnectionsPerAdapter
    let transfers = listArgument("--fleet-transfers").flatMap { $0.first }.flatMap { Int($0) } ?? FleetOptions.defaultTransfersPerAdapter
    for kib in listArgument("--fleet-kib")?.compactMap({ Int($0) }).sorted() ?? [256, 1024] {
        try await fleetBenchmark(kib: kib, connections: connections, transfers: transfers)
    }
}

// 2. Engine and checksums.
if runs("engine") {
    print("\n== engine and checksums (wall clock)")
    let big = pseudoRandom(64 << 20)
    let crcTime = wallSeconds { _ = CRC32.checksum(big) }
    record("codec", "CRC-32 (zlib)", Double(big.count) / crcTime / 1e6, "MB/s")
    let shaTime = wallSeconds { _ = SHA256Digest.hash(big) }
    record("codec", "SHA-256 (swift-crypto)", Double(big.count) / shaTime / 1e6, "MB/s")
    // The median of five: on a shared 2-core VM a single run varies by ±20 %.
    var loopbackRuns: [Double] = []
    for _ in 0..<5 { loopbackRuns.append(try await sendOverLoopback(Array(big.prefix(16 << 20)))) }
    let loopbackSeconds = loopbackRuns.sorted()[2]
    record("engine", "engine over in-memory loopback, 244-byte packets (median of 5)", Double(16 << 20) / loopbackSeconds / 1e6, "MB/s", target: "≥ 200 MB/s")
    let simulated = DispatchTime.now().uptimeNanoseconds
    _ = try await simulatedFlash("sim://2m-dle", image: image)
    record("engine", "wall time of a simulated 1 MiB flash (2m-dle)", Double(DispatchTime.now().uptimeNanoseconds - simulated) / 1e6, "ms", target: "well under 1 s")

}

// 3. Peak memory streaming a 256 MiB image, in a child process.
if runs("memory") {
    print("\n== memory")
    let imagePath = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-bench-256m.bin").path
    _ = FileManager.default.createFile(atPath: imagePath, contents: nil)
    let writer = try FileHandle(forWritingTo: URL(fileURLWithPath: imagePath))
    for part in 0..<16 { writer.write(Data(pseudoRandom(16 << 20, seed: UInt64(100 + part)))) }
    try writer.close()
    defer { try? FileManager.default.removeItem(atPath: imagePath) }
    let child = Process()
    child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
    child.arguments = ["--memory-probe", imagePath]
    let pipe = Pipe()
    child.standardOutput = pipe
    try child.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    child.waitUntilExit()
    if let peak = Int(output.trimmingCharacters(in: .whitespacesAndNewlines)) {
        record("memory", "host peak memory hashing and sending a 256 MiB image from its file", Double(peak) / 1e6, "MB", target: "≤ 64 MB")
    }
}

// 4. Delta patches: the diff of a 1 MiB pair, in a child process for its peak memory.
if runs("delta") {
    print("\n== delta")
    let child = Process()
    child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
    child.arguments = ["--delta-probe"]
    let pipe = Pipe()
    child.standardOutput = pipe
    try child.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    child.waitUntilExit()
    let fields = output.split(whereSeparator: \.isWhitespace).compactMap { Double($0) }
    if fields.count == 3 {
        record("delta", "diff and heatshrink of a 1 MiB image pair (SA-IS, bsdiff)", fields[0], "s", target: "≤ 2 s")
        record("delta", "peak memory of that diff (the whole process)", fields[1] / 1e6, "MB", target: "≤ 64 MB")
        record("delta", "its patch for ten changed bytes and 100 inserted", fields[2] / 1024, "KiB", target: "≈ 1.6 % of the image")
    }
    let (old, new) = deltaPair()
    let patch = DeltaPatch.create(from: old, to: new)
    let started = DispatchTime.now().uptimeNanoseconds
    _ = try DeltaPatch.apply(patch, to: old)
    record("delta", "applying that patch whole", Double(DispatchTime.now().uptimeNanoseconds - started) / 1e6, "ms")
}

let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
try encoder.encode(log.figures).write(to: URL(fileURLWithPath: jsonPath))
print("\nwrote \(jsonPath)")
