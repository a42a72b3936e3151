// bleota-fault-matrix: thousands of seeded simulated updates across link
// presets, protocols and faults, counted by how they ended.
//
//   swift run -c release bleota-fault-matrix --runs 10000      # the release check
//   swift run bleota-fault-matrix --runs 2000                   # what CI runs
//
// Every run ends in one of these classes; the first two are the only
// acceptable ones when the update failed, and the command exits 1 on any
// "unsafe" or "misreported" run:
//   success           bleota reported success and the device runs the new image, confirmed
//   clean failure     bleota reported a failure and the device still runs its old image, untouched
//   late failure      bleota reported a failure that says what the device now runs, and it is true
//   misreported       what bleota said does not match what the device runs
//   unsafe            the device runs (or will boot) an image that is neither the old nor the new one
//   simulation error  the simulation itself failed (a deadlock or runaway time)

import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import Foundation

struct Options {
    var runs = 2000
    var seed: UInt64 = 1
    /// "native-delta": bleota's protocol sending a delta patch against the image the device runs (`flash --base`);
    /// "espressif-ota-delta": an esp_delta_ota patch through Espressif's BLE OTA, applied by the device as it arrives.
    var protocols = ["native", "native-delta", "espressif-ota-delta", "smp", "nordic-dfu", "nordic-legacy", "espressif-ota", "suota", "ti-oad", "silabs-ota", "telink-ota"]
    var jobs = 2
    var json = false
    var verbose = false

    init(_ arguments: [String]) {
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--runs": runs = Int(iterator.next() ?? "") ?? runs
            case "--seed": seed = UInt64(iterator.next() ?? "") ?? seed
            case "--protocol": protocols = [iterator.next() ?? "native"]
            case "--jobs": jobs = max(1, Int(iterator.next() ?? "") ?? jobs)
            case "--json": json = true
            case "--verbose": verbose = true
            case "--help", "-h":
                print(
                    "usage: bleota-fault-matrix [--runs N] [--seed S] [--protocol native|native-delta|espressif-ota-delta|smp|nordic-dfu|nordic-legacy|espressif-ota|suota|ti-oad|silabs-ota|telink-ota] [--jobs J] [--json] [--verbose]"
                )
                exit(0)
            default:
                FileHandle.standardError.write(Data("unknown option \(argument): see --help\n".utf8))
                exit(2)
            }
        }
    }
}

/// The fault a run injects: one class per run, so the counts say which fault does what.
enum FaultClass: String, CaseIterable, Codable {
    case clean, loss1to5 = "loss 1-5 %", loss10 = "loss 10 %", loss20 = "loss 20 %", loss50 = "loss 50 %"
    case notificationLoss = "notification loss", corruption, duplication, disconnect, powerLoss = "power loss", reboot, mixed
    /// Native only: `slow-flash` with 1-, 8- or 20-byte packets, half the runs with 5 % of writes
    /// duplicated (a copy takes a place in the device's 4-packet queue). Such updates ran for
    /// hours, or past the runtime's limit (issue 48, item 6): one that does now is a simulation error.
    case smallPackets = "small packets"

    /// The packet size a run of this class forces (nil: the link's).
    func packetSize(random: inout SeededRandom) -> Int? {
        self == .smallPackets ? [1, 8, 20][Int(random.next() % 3)] : nil
    }

    /// `corruptible`: false for a protocol whose device takes part of the image unchecked (SUOTA's CRC
    /// covers the code only), which then meets no corruption: a flipped bit there is installed on the
    /// real chip too, and a real link's CRC-24 is what keeps it out.
    func address(preset: String, seed: UInt64, imageSize: Int, corruptible: Bool = true, random: inout SeededRandom) -> String {
        func at() -> Int { Int(random.next() % UInt64(max(1, imageSize))) + 200 }
        let keys: String
        switch self {
        case .clean: keys = ""
        case .loss1to5: keys = "&loss=\([0.01, 0.02, 0.05][Int(random.next() % 3)])"
        case .loss10: keys = "&loss=0.1"
        case .loss20: keys = "&loss=0.2"
        case .loss50: keys = "&loss=0.5"
        case .notificationLoss: keys = "&notify-loss=\([0.05, 0.1, 0.2][Int(random.next() % 3)])"
        case .corruption: keys = "&corrupt=\([0.001, 0.005, 0.01][Int(random.next() % 3)])"
        case .duplication: keys = "&duplicate=\([0.02, 0.05, 0.1][Int(random.next() % 3)])"
        case .disconnect: keys = "&disconnect-at=\(at())"
        case .powerLoss: keys = "&power-loss-at=\(at())"
        case .reboot: keys = "&reboot-at=\(at())"
        case .mixed: keys = "&loss=0.05&notify-loss=0.05&duplicate=0.02\(corruptible ? "&corrupt=0.002" : "")&disconnect-at=\(at())"
        case .smallPackets: keys = random.next() % 2 == 0 ? "" : "&duplicate=0.05"
        }
        return "sim://\(self == .smallPackets ? "slow-flash" : preset)?seed=\(seed)\(keys)"
    }
}

enum Outcome: String, CaseIterable, Codable {
    case success, cleanFailure = "clean failure", lateFailure = "late failure", misreported, unsafe
    case simulationError = "simulation error"
}

struct RunResult: Sendable {
    var protocolName: String
    var fault: FaultClass
    var outcome: Outcome
    var address: String
    var detail: String
}

let presets = LinkPreset.all.map(\.name)

/// What the device runs at the end, read from its storage.
enum DeviceState: Equatable { case old, newConfirmed, newUnconfirmed, inBootloader, other(String) }

func runOne(index: Int, options: Options) async -> RunResult {
    var random = SeededRandom(seed: options.seed &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(index))
    let protocolName = options.protocols[index % options.protocols.count]
    let delta = protocolName.hasSuffix("-delta")
    let registryName = delta ? String(protocolName.dropLast("-delta".count)) : protocolName
    let corruptible = protocolName != "suota"
    let classes = FaultClass.allCases.filter { (corruptible || $0 != .corruption) && (registryName == "native" || $0 != .smallPackets) }
    let fault = classes[Int(random.next() % UInt64(classes.count))]
    let preset = presets[Int(random.next() % UInt64(presets.count))]
    let packetSize = fault.packetSize(random: &random)
    let small = preset == "1m-no-dle-30ms" || preset == "slow-flash" || packetSize != nil
    let firmware = (0..<(small ? 6_000 : 20_000)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    let address = fault.address(preset: preset, seed: random.next() % 1_000_000, imageSize: firmware.count, corruptible: corruptible, random: &random)
    // What a report prints: enough to run the same update with `bleota flash`.
    let shown = packetSize.map { "\(address) --packet-size \($0)" } ?? address
    // Telink's protocol as shipped: from its description (run from the repository's root).
    let telink = try? DescribedProtocol(contentsOf: "protocols/telink-ota.yaml")
    let registry = telink.map { ProtocolRegistry.builtIn.registering($0) } ?? .builtIn
    guard let chosen = registry.named(registryName),
        let parsed = try? SimulatorAddress(parsing: address + "&protocol=\(registryName)", registry: registry)
    else {
        return RunResult(protocolName: protocolName, fault: fault, outcome: .simulationError, address: shown, detail: "bad address")
    }
    let image: PreparedImage
    let newBytes: [UInt8]
    if protocolName == "smp" {
        newBytes = MCUbootImage.build(firmware: firmware, version: MCUbootImage.Version(major: 2, minor: 0, revision: 0, build: 0))
        guard let prepared = try? SMPProtocol.prepare(newBytes, path: "image", keyPath: nil) else {
            return RunResult(protocolName: protocolName, fault: fault, outcome: .simulationError, address: shown, detail: "image")
        }
        image = prepared
    } else if protocolName == "nordic-dfu" {
        newBytes = firmware
        let packet = NordicInitPacket(
            firmwareVersion: 2, hardwareVersion: 52, softDeviceRequirements: [0x0101], type: .application,
            applicationSize: UInt32(firmware.count), hash: SHA256Digest.hash(firmware))
        image = PreparedImage(parts: [.init(name: "application", data: firmware, metadata: packet.encode())], version: "2", summary: "")
    } else if protocolName == "nordic-legacy" {
        newBytes = firmware
        let packet = NordicLegacyInitPacket(applicationVersion: 2, softDeviceRequirements: [0x00B6], imageCRC: NordicLegacyInitPacket.crc(of: firmware))
        image = PreparedImage(parts: [.init(name: "application", data: firmware, metadata: packet.encode())], version: "2", summary: "")
    } else if registryName == "espressif-ota" {
        newBytes = ESPAppImage.sample(firmware)
        image = PreparedImage(bytes: newBytes, version: "2", summary: "")
    } else if protocolName == "ti-oad" {
        newBytes = TIOADImageHeader.sample(firmware, softwareVersion: "0002")
        image = PreparedImage(bytes: newBytes, version: "2", summary: "")
    } else if protocolName == "silabs-ota" {
        newBytes = GeckoBootloaderImage.sample(firmware, applicationVersion: 2)
        image = PreparedImage(bytes: newBytes, version: "2", summary: "")
    } else if protocolName == "suota" {
        newBytes = SUOTAImageHeader.sample(firmware, version: "2.0.0", timestamp: 2)
        image = PreparedImage(bytes: newBytes, version: "2", summary: "")
    } else if let described = chosen as? DescribedProtocol {
        newBytes = described.description.image.sample(firmware)
        image = PreparedImage(bytes: newBytes, version: "2", summary: "")
    } else {
        newBytes = firmware
        image = PreparedImage(bytes: firmware, version: "2.0.0", summary: "")
    }
    do {
        let (report, state) = try await SimulationRuntime.run(maximumVirtualTime: .seconds(4 * 3600)) { runtime -> (Result<UpdateReport, TransferError>, DeviceState) in
            let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
            let half = try chosen.makeDevice(Simulation.configuration(parsed, for: chosen))
            let old = await half.firmware.running ?? []
            await world.add(
                SimulatedDevice(address: Simulation.deviceAddress, half: half, model: parsed.model, speaking: chosen))
            let connector = SimulatedConnector(world: world, address: Simulation.deviceAddress, description: address)
            var tuning = TransferTuning()
            if let packetSize { tuning.packetSize = packetSize }
            let host = chosen.makeHost(
                HostContext(
                    protocolName: registryName, connector: connector, clock: world.clock, tuning: tuning,
                    explicitKnobs: packetSize == nil ? [] : [.packetSize]))
            // A delta update: the running image with a few bytes changed and the run's firmware appended,
            // sent as a patch against what the device runs.
            var sent = image
            var expected = newBytes
            if delta {
                var edited = old
                var editing = SeededRandom(seed: UInt64(index) &+ 0xDE17A)
                for _ in 0..<3 where !edited.isEmpty { edited[Int(editing.next() % UInt64(edited.count))] &+= 1 }
                expected = edited + firmware.prefix(2_000)
                // An ESP32 validates what it rebuilds: the new image is an application image too.
                if registryName == "espressif-ota" { expected = ESPAppImage.sample(expected) }
                sent = PreparedImage(bytes: expected, version: "2.0.0", summary: "")
                sent.deltaBase = DeltaBase(bytes: old, policy: .always, source: "the running image")
            }
            let outcome: Result<UpdateReport, TransferError>
            let mode = chosen.flashModes.contains(.testAndConfirm) ? FlashMode.testAndConfirm : chosen.flashModes[0]
            do throws(TransferError) { outcome = .success(try await host.flash(sent, mode: mode)) } catch { outcome = .failure(error) }
            // A reset under way finishes before the device is looked at.
            try? await world.clock.sleep(for: .seconds(2))
            return (outcome, deviceState(await half.firmware, old: old, new: expected, version: sent.version))
        }
        let (class_, detail) = classify(report, state)
        return RunResult(protocolName: protocolName, fault: fault, outcome: class_, address: shown, detail: detail)
    } catch {
        return RunResult(protocolName: protocolName, fault: fault, outcome: .simulationError, address: shown, detail: "\(error)")
    }
}

/// How an update left a device, from what the device itself holds and runs (the same
/// judgement for every protocol): the old image or the new one, confirmed or on trial,
/// running or waiting in the bootloader; anything else is a damaged ending.
func deviceState(_ firmware: FirmwareState, old: [UInt8], new: [UInt8], version: String) -> DeviceState {
    // What runs now, and what the bootloader would start at the next reset, must both be old or new.
    if let pending = firmware.pending, pending != new, pending != old { return .other("a damaged image is pending") }
    guard let running = firmware.running else {
        return firmware.mode == .bootloader ? .inBootloader : .other("no image, yet not in the bootloader")
    }
    let waiting = firmware.mode == .bootloader
    if running == new, firmware.version.map({ $0 == version }) ?? true {
        return waiting ? .inBootloader : firmware.confirmed ? .newConfirmed : .newUnconfirmed
    }
    if running == old { return waiting ? .inBootloader : .old }
    return .other("the device holds neither the old nor the new image")
}

func classify(_ report: Result<UpdateReport, TransferError>, _ state: DeviceState) -> (Outcome, String) {
    if case .other(let why) = state { return (.unsafe, why) }
    switch report {
    case .success:
        return state == .newConfirmed ? (.success, "") : (.misreported, "reported success but the device is \(state)")
    case .failure(let error):
        switch (error.outcome, state) {
        case (nil, .old): return (.cleanFailure, error.description)
        case (.oldImage?, .old), (.newImageUnconfirmed?, .newUnconfirmed), (.newImageConfirmed?, .newConfirmed),
            (.inBootloader?, .inBootloader):
            return (.lateFailure, error.description)
        case (.unknown?, _): return (.lateFailure, error.description)
        case (nil, .inBootloader):
            // The update stopped before the activation: the bootloader waits with the old image kept.
            return (.cleanFailure, error.description)
        default:
            return (.misreported, "reported \(error.outcome.map(\.name) ?? "no change") but the device is \(state): \(error.description)")
        }
    }
}

let options = Options(Array(CommandLine.arguments.dropFirst()))
let started = Date()
var results: [RunResult] = []
await withTaskGroup(of: RunResult.self) { group in
    var next = 0
    for _ in 0..<min(options.jobs, options.runs) {
        let index = next
        group.addTask { await runOne(index: index, options: options) }
        next += 1
    }
    while let result = await group.next() {
        results.append(result)
        if options.verbose || result.outcome == .unsafe || result.outcome == .misreported || result.outcome == .simulationError {
            print("\(result.outcome.rawValue): \(result.protocolName) \(result.address): \(result.detail)")
        }
        if next < options.runs {
            let index = next
            group.addTask { await runOne(index: index, options: options) }
            next += 1
        }
    }
}

struct Row: Codable {
    var protocolName: String
    var fault: String
    var counts: [String: Int]
    var runs: Int
}
var rows: [Row] = []
for protocolName in options.protocols {
    for fault in FaultClass.allCases {
        let mine = results.filter { $0.protocolName == protocolName && $0.fault == fault }
        guard !mine.isEmpty else { continue }
        var counts: [String: Int] = [:]
        for outcome in Outcome.allCases { counts[outcome.rawValue] = mine.filter { $0.outcome == outcome }.count }
        rows.append(Row(protocolName: protocolName, fault: fault.rawValue, counts: counts, runs: mine.count))
    }
}
let bad = results.filter { [.unsafe, .misreported, .simulationError].contains($0.outcome) }.count
if options.json {
    struct Output: Codable {
        var runs: Int
        var seed: UInt64
        var seconds: Double
        var rows: [Row]
        var unsafeOrMisreported: Int
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    print(
        String(
            decoding: try encoder.encode(
                Output(
                    runs: results.count, seed: options.seed, seconds: Date().timeIntervalSince(started),
                    rows: rows, unsafeOrMisreported: bad)), as: UTF8.self))
} else {
    print("\(results.count) seeded updates (base seed \(options.seed)) in \(String(format: "%.0f", Date().timeIntervalSince(started))) s")
    let columns = Outcome.allCases.map(\.rawValue)
    print("protocol       fault                runs  " + columns.map { $0.padding(toLength: 14, withPad: " ", startingAt: 0) }.joined())
    for row in rows {
        let cells = columns.map { String(row.counts[$0] ?? 0).padding(toLength: 14, withPad: " ", startingAt: 0) }.joined()
        print(
            row.protocolName.padding(toLength: 15, withPad: " ", startingAt: 0) + row.fault.padding(toLength: 21, withPad: " ", startingAt: 0)
                + String(row.runs).padding(toLength: 6, withPad: " ", startingAt: 0) + cells)
    }
    for protocolName in options.protocols {
        let mine = results.filter { $0.protocolName == protocolName }
        let succeeded = mine.filter { $0.outcome == .success }.count
        print("\(protocolName): \(succeeded) of \(mine.count) succeeded (\(String(format: "%.1f", 100 * Double(succeeded) / Double(max(1, mine.count)))) %)")
    }
}
exit(bad == 0 ? 0 : 1)
