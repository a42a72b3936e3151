import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaSimulator
import BleotaSystem
import Foundation
import Logging

/// `bleota tune`: find the packet size, window and delay that suit a device.
struct TuneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tune",
        abstract: "Find the packet size, window and inter-packet delay that suit a device, by measuring them.",
        discussion: """
            Runs short test transfers (the device checks and discards them: its firmware and files are not touched), \
            searching from the default setting, held fixed, for the best goodput among settings that lose under 1 % \
            of packets. --grid measures every setting instead. flash, push and pull start their closed-loop pacing \
            from a saved setting, so tune then measures that against the default closed loop, and saves the choice \
            only when it is faster: in $XDG_CONFIG_HOME/bleota/tuning.json (~/.config/bleota/…), for this device. \
            flash, push and pull use it unless told --no-saved-tuning or given settings on the command line.
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @Flag(name: .long, help: "Measure every setting of the grid, not only the search's path.") var grid = false
    @Option(name: .long, help: "Bytes per trial transfer.") var trialBytes = 32 * 1024
    @Option(name: .long, help: "The largest packet size to try, in payload bytes as flash --packet-size counts them (default: the link's largest).")
    var packetSize: Int?
    /// `--packet-size`'s name in 0.1.0, kept for one release.
    @Option(name: .customLong("maximum-packet"), help: .hidden) var deprecatedMaximumPacket: Int?
    var maximumPacket: Int? { packetSize ?? deprecatedMaximumPacket }
    @Option(name: .long, help: "Write a heatmap of goodput over packet size × delay (loss shown, choice marked) to this SVG file.") var plot: String?
    @Flag(name: .customLong("no-saved-tuning"), help: "Measure and report, and leave the saved tuning as it is (as flash's --no-saved-tuning leaves it unused).")
    var leavesSavedTuning = false
    /// `--no-saved-tuning`'s name in 0.1.0, kept for one release.
    @Flag(name: .customLong("no-save"), help: .hidden) var deprecatedNoSave = false
    var noSave: Bool { leavesSavedTuning || deprecatedNoSave }
    @Option(
        name: .long,
        help:
            "Measure with this image instead of test bytes, for a protocol whose devices take only real images (Nordic DFU packages): it is sent as flash would send it but never activated."
    )
    var image: String?

    func validate() throws {
        guard (1024...(16 << 20)).contains(trialBytes) else { throw ValidationError("--trial-bytes \(trialBytes) is out of range: use 1024…16777216") }
        if let maximumPacket, maximumPacket < 16 { throw ValidationError("--packet-size \(maximumPacket) is out of range: tune tries 16 bytes or more") }
    }

    struct Report: Codable {
        var device: String
        var identity: String
        var mode: String
        var space: TuningSpace
        var trials: [TuningTrial]
        var gridSize: Int
        var chosen: TuningTrial
        /// The search's start: the default setting held fixed.
        var reference: TuningTrial?
        /// What flash does with no options and nothing saved: closed-loop pacing from the default setting.
        var defaultClosedLoop: TuningTrial
        /// Closed-loop pacing from the choice: what flash would do with it saved.
        var chosenClosedLoop: TuningTrial
        /// Whether the choice was saved: only when its closed loop beats the default's (and not --no-save).
        var saved: Bool
        var reasons: [String]
        var savedTo: String?
        /// A setting saved before that this run removed, because the default closed loop was faster.
        var removedEarlier: Bool
    }

    @OptionGroup var protocolOption: ProtocolChoice

    func run() async throws {
        let logger = global.makeLogger("bleota.tune")
        if deprecatedMaximumPacket != nil {
            Terminal.standardError.writeLine("warning: tune --maximum-packet is now --packet-size, as in flash; the old name goes in the next release")
        }
        if deprecatedNoSave {
            Terminal.standardError.writeLine("warning: tune --no-save is now --no-saved-tuning, as in flash; the old name goes in the next release")
        }
        if let plot { try checkOutputPath(plot) }
        // Tuning measures test transfers the device checks and discards: a protocol without
        // them could only be measured by changing the device.
        // The image decides the protocol as it does for flash (a Nordic package on sim://slow-flash).
        let updateProtocol = try await deviceOptions.device.resolveProtocol(
            explicit: protocolOption.name, image: image.map(ImageFiles.probe), needs: .testTransfer,
            timeout: deviceOptions.timeouts.connect, pairing: deviceOptions.pairing.policy, logger: logger)
        try await tune(updateProtocol, logger: logger)
    }

    func tune(_ updateProtocol: any UpdateProtocol, logger: Logger) async throws {
        let timeouts = deviceOptions.timeouts
        let trialBytes = self.trialBytes
        let maximumPacket = self.maximumPacket
        let useGrid = grid
        let quiet = deviceOptions.quiet || global.json
        let name = updateProtocol.name
        // A protocol whose devices take only real images measures with the one given, never activated.
        var trialImage: PreparedImage?
        if updateProtocol.testTransferNeedsImage {
            guard let image else {
                throw CommandFailure(
                    .usage, "\(updateProtocol.identity.displayName) devices take only real images: give the package to measure with, --image FILE (it is sent but never activated)")
            }
            do { trialImage = try updateProtocol.prepareImage(ImageRequest(path: image)) } catch { throw error.commandFailure }
        } else if image != nil {
            throw CommandFailure(.usage, "--image: \(updateProtocol.identity.displayName) measures with test bytes the device discards: drop --image")
        }
        let measuredImage = trialImage
        let outcome = try await deviceOptions.device.session(protocol: updateProtocol, logger: logger, pairing: deviceOptions.pairing.policy) { connector, clock in
            /// A host that runs `tuning` as given, or (`asFlash`) one that picks its own defaults, as flash
            /// does with no saved setting (a protocol's defaults come from the device: SMP's buffers, legacy
            /// DFU's receipts), where `tuning`'s knobs mean nothing.
            @Sendable func host(_ tuning: TransferTuning, asFlash: Bool = false) -> any ProtocolHost {
                updateProtocol.makeHost(
                    HostContext(
                        protocolName: name, connector: connector, clock: clock, tuning: tuning,
                        explicitKnobs: asFlash ? [] : [.packetSize, .window, .delay], timeouts: timeouts, logger: logger))
            }
            // The link's largest packet, from a default test transfer (also the reference point).
            let defaults = TransferTuning()
            var trialTuning = defaults
            trialTuning.compression = .off
            trialTuning.maxReconnects = 0
            // Each trial measures one fixed setting; closed-loop pacing would move away from it.
            trialTuning.adaptive = false
            let base = trialTuning
            let seed = SeedCounter()
            /// One test transfer at `point`: held there, or (`closedLoop`) with pacing starting there, as flash
            /// paces; or (`asFlash`) exactly as flash runs with no saved setting, the point then being what
            /// the protocol chose for itself (the baseline a saved setting must beat).
            @Sendable func measure(_ point: TuningPoint, closedLoop: Bool = false, asFlash: Bool = false) async -> TuningTrial {
                let bytes = pseudoRandomBytes(trialBytes, seed: seed.next())
                var tuning = point.apply(to: base)
                tuning.adaptive = closedLoop || asFlash
                do {
                    let trialHost = host(tuning, asFlash: asFlash)
                    let report =
                        if let measuredImage {
                            try await trialHost.testTransfer(image: measuredImage)
                        } else {
                            try await trialHost.testTransfer(bytes)
                        }
                    let statistics = report.statistics
                    let loss = statistics.packetsSent > 0 ? Double(statistics.packetsLost) / Double(statistics.packetsSent) : 0
                    let ran =
                        asFlash
                        ? TuningPoint(packetSize: report.tuning.packetSize ?? report.packetSize, window: report.tuning.window, delay: report.tuning.interPacketDelay)
                        : point
                    let trial = TuningTrial(
                        point: ran, goodput: report.goodput, loss: loss, packetsSent: statistics.packetsSent,
                        packetsResent: statistics.packetsResent)
                    if !quiet { Terminal.standardError.writeLine(Self.row(trial, closedLoop: closedLoop || asFlash)) }
                    return trial
                } catch {
                    let trial = TuningTrial(point: point, goodput: 0, loss: 1, packetsSent: 0, packetsResent: 0, failure: error.message)
                    if !quiet { Terminal.standardError.writeLine(Self.row(trial, closedLoop: closedLoop)) }
                    return trial
                }
            }
            // The largest packet the link and device take: what a default transfer uses.
            let probeReport: UpdateReport
            do {
                var probeTuning = base
                probeTuning.packetSize = maximumPacket
                let probeHost = host(probeTuning)
                probeReport =
                    if let measuredImage {
                        try await probeHost.testTransfer(image: measuredImage)
                    } else {
                        try await probeHost.testTransfer(pseudoRandomBytes(4096, seed: seed.next()))
                    }
            } catch let error as TransferError {
                throw CommandFailure(error.exitStatus, "the first test transfer failed: \(error)")
            }
            let effectiveLargest = probeReport.packetSize
            let space = TuningSpace.standard(maximumPacket: effectiveLargest).restricted(to: Set(updateProtocol.tuningKnobs.keys))
            if !quiet { Terminal.standardError.writeLine(Self.header) }
            let reference = await measure(TuningPoint(packetSize: effectiveLargest, window: defaults.window, delay: defaults.interPacketDelay))
            let start = reference.point
            let trials: [TuningTrial]
            if useGrid {
                trials = await TuningSearch.grid(space) { point in await measure(point) }
            } else {
                trials = await TuningSearch.search(space, from: start) { point in
                    point == reference.point ? reference : await measure(point)
                }
            }
            guard let (chosen, reasons) = TuningSearch.choose(trials, reference: reference) else {
                throw CommandFailure(.deviceError, "every trial failed: the device could not take any setting (see the table above)")
            }
            // What the choice is worth to flash, which paces in a closed loop from where it starts: flash as it
            // runs with no saved setting (the protocol's own defaults, not tune's reference point: legacy DFU's
            // default is a receipt every few writes, not a window of 32) against flash starting from the choice.
            let defaultClosedLoop = await measure(reference.point, asFlash: true)
            let chosenClosedLoop = await measure(chosen.point, closedLoop: true)
            return (space, trials, reference, chosen, reasons, defaultClosedLoop, chosenClosedLoop)
        }
        let (space, trials, reference, chosen, searchReasons, defaultClosedLoop, chosenClosedLoop) = outcome.value
        var reasons = searchReasons
        // A saved setting must never make flash slower than the default: saved only when its closed loop is faster.
        // The baseline is flash with no saved setting, the protocol choosing for itself: a choice equal to
        // tune's reference point is still a setting of its own, worth saving only if it is faster.
        let beatsDefault =
            chosenClosedLoop.failure == nil && (defaultClosedLoop.failure != nil || chosenClosedLoop.goodput > defaultClosedLoop.goodput)
        if defaultClosedLoop.failure != nil {
            reasons.append("as flash's starting point it finished where the default closed loop failed (\(defaultClosedLoop.failure!))")
        } else {
            let gain = defaultClosedLoop.goodput > 0 ? (chosenClosedLoop.goodput / defaultClosedLoop.goodput - 1) * 100 : 0
            reasons.append(
                String(
                    format: "as flash's starting point: %@/s with closed-loop pacing, %+.0f %% against flash with no saved setting (the default closed loop's %@/s)%@",
                    formatBytes(Int(chosenClosedLoop.goodput)), gain, formatBytes(Int(defaultClosedLoop.goodput)),
                    beatsDefault ? "" : ", so it is not saved"))
        }
        let identity = DeviceIdentity(deviceOptions.device.text, protocolName: updateProtocol.name)
        let store = TuningStore()
        var savedTo: String?
        var removedEarlier = false
        if !noSave {
            do {
                if beatsDefault {
                    savedTo = try store.save(
                        SavedTuning(
                            point: chosen.point, goodput: chosenClosedLoop.goodput, loss: chosen.loss,
                            trials: trials.count, savedAt: Date()), for: identity)
                } else {
                    // An earlier choice is no faster than the default this run measured: flash goes back to the default.
                    removedEarlier = try store.remove(identity)
                }
            } catch {
                throw CommandFailure(.failure, "cannot save the tuning in \(store.path): \(error.localizedDescription)")
            }
        }
        if let plot {
            let svg = TuningPlot.svg(space: space, trials: trials, chosen: chosen, title: "bleota tune — \(deviceOptions.device)")
            try writeFileAtomically(Array(svg.utf8), to: plot)
        }
        let report = Report(
            device: deviceOptions.device.text, identity: identity.key, mode: grid ? "grid" : "search", space: space,
            trials: trials, gridSize: space.count, chosen: chosen, reference: reference, defaultClosedLoop: defaultClosedLoop,
            chosenClosedLoop: chosenClosedLoop, saved: savedTo != nil, reasons: reasons, savedTo: savedTo, removedEarlier: removedEarlier)
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(report))
            return
        }
        var lines = [
            "\(trials.count) of \(space.count) settings measured (\(grid ? "full grid" : "search")); chose \(chosen.point):",
            String(format: "  %@/s, loss %.1f %%, %d resent", formatBytes(Int(chosen.goodput)), chosen.loss * 100, chosen.packetsResent),
        ]
        lines += reasons.map { "  - " + $0 }
        if let savedTo {
            lines.append("saved for \(identity.key) in \(savedTo); flash, push and pull will start from it")
        } else if removedEarlier {
            lines.append("removed the setting saved earlier for \(identity.key) from \(store.path): flash, push and pull use the default")
        } else if !noSave {
            lines.append("nothing saved: flash, push and pull use the default")
        }
        if let plot { lines.append("heatmap written to \(plot)") }
        Terminal.standardOutput.writeLine(lines.joined(separator: "\n"))
    }

    static let header = "packet  window  delay ms   goodput/s   loss %  resent"
    /// A trial's line; a closed-loop one is marked, since its window and delay are only where pacing started.
    static func row(_ trial: TuningTrial, closedLoop: Bool = false) -> String {
        let mark = closedLoop ? "  (closed loop from here)" : ""
        if let failure = trial.failure {
            return String(
                format: "%6d  %6d  %8.1f   failed: %@%@", trial.point.packetSize, trial.point.window,
                Double(trial.point.delayMicroseconds) / 1000, failure, mark)
        }
        return String(
            format: "%6d  %6d  %8.1f  %10@  %7.1f  %6d%@", trial.point.packetSize, trial.point.window,
            Double(trial.point.delayMicroseconds) / 1000, formatBytes(Int(trial.goodput)), trial.loss * 100, trial.packetsResent, mark)
    }
}

/// Seeds for the trials' payloads: a different stream each time, so no trial resumes another.
final class SeedCounter: @unchecked Sendable {
    private var value: UInt64 = 0x7E57
    private let lock = NSLock()
    func next() -> UInt64 {
        lock.lock()
        defer { lock.unlock() }
        value &+= 1
        return value
    }
}

func pseudoRandomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var generator = SeededRandom(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    var index = 0
    while index < count {
        let word = generator.next()
        for shift in stride(from: 0, to: 64, by: 8) where index < count {
            bytes[index] = UInt8(truncatingIfNeeded: word >> UInt64(shift))
            index += 1
        }
    }
    return bytes
}

/// Which device a saved tuning belongs to: the address without what does not
/// change the device (a simulator seed, a BLE adapter or security level).
struct DeviceIdentity: Equatable {
    var key: String

    /// `protocolName` is the protocol the command resolved. A simulated device speaks whatever the
    /// command picks unless its address names one, so `sim://slow-flash` flashed with a Nordic
    /// package is the same device as `sim://slow-flash?protocol=nordic-dfu`: for `sim://` the key
    /// names the resolved protocol as `protocol=` (none for the simulator's default protocol, so
    /// settings saved before keep their keys), whatever the address said, and leaves out `seed=`.
    init(_ address: String, protocolName: String? = nil, defaultProtocol: String? = CommandContext.registry.defaultProtocol?.name) {
        let simulated = address.hasPrefix("sim://")
        let query = address.firstIndex(of: "?")
        let base = String(address[..<(query ?? address.endIndex)])
        if address.hasPrefix("ble://") || query == nil && !simulated {
            key = base
            return
        }
        var kept = query.map { address[address.index(after: $0)...].split(separator: "&").map(String.init) } ?? []
        kept = kept.filter { !$0.hasPrefix("seed=") }
        if simulated, let protocolName {
            kept = kept.filter { !$0.hasPrefix("protocol=") } + (protocolName == defaultProtocol ? [] : ["protocol=\(protocolName)"])
        }
        key = kept.isEmpty ? base : base + "?" + kept.joined(separator: "&")
    }
}

/// One device's chosen setting, as saved.
struct SavedTuning: Codable, Equatable {
    var point: TuningPoint
    var goodput: Double
    var loss: Double
    var trials: Int
    var savedAt: Date
}

/// `$XDG_CONFIG_HOME/bleota/tuning.json` (or `~/.config/…`): saved settings by device identity.
struct TuningStore {
    let path: String

    init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        let base =
            environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.config")
        path = base + "/bleota/tuning.json"
    }

    struct File: Codable { var devices: [String: SavedTuning] = [:] }

    func load() -> File {
        guard let data = FileManager.default.contents(atPath: path) else { return File() }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return (try? decoder.decode(File.self, from: data)) ?? File()
    }

    func saved(for identity: DeviceIdentity) -> SavedTuning? { load().devices[identity.key] }

    /// Removes the setting saved for `identity` (atomically); false when there was none.
    func remove(_ identity: DeviceIdentity) throws -> Bool {
        var file = load()
        guard file.devices.removeValue(forKey: identity.key) != nil else { return false }
        try write(file)
        return true
    }

    /// Saves atomically; returns the file's path.
    func save(_ tuning: SavedTuning, for identity: DeviceIdentity) throws -> String {
        var file = load()
        file.devices[identity.key] = tuning
        try write(file)
        return path
    }

    private func write(_ file: File) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try AtomicFile.write(Array(try encoder.encode(file)), to: path)
    }
}

/// The heatmap `tune --plot` draws: packet size down, delay across, colour
/// by goodput (the best window at that cell), loss and window written in,
/// untried cells grey, the choice outlined.
enum TuningPlot {
    static func svg(space: TuningSpace, trials: [TuningTrial], chosen: TuningTrial, title: String) -> String {
        let rows = space.packetSizes.reversed() as [Int]
        let columns = space.delaysMicroseconds
        let cellWidth = 104, cellHeight = 58, left = 90, top = 70
        let width = left + columns.count * cellWidth + 30, height = top + rows.count * cellHeight + 90
        var best: [String: TuningTrial] = [:]
        for trial in trials where trial.failure == nil {
            let key = "\(trial.point.packetSize)/\(trial.point.delayMicroseconds)"
            if best[key].map({ trial.score > $0.score }) ?? true { best[key] = trial }
        }
        let top1 = max(1, best.values.map(\.goodput).max() ?? 1)
        func escape(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        }
        func colour(_ fraction: Double) -> String {
            // Red (poor) through yellow to green (best).
            let f = min(1, max(0, fraction))
            let red = f < 0.5 ? 220 : Int(220 - (f - 0.5) * 2 * 170)
            let green = f < 0.5 ? Int(60 + f * 2 * 140) : 200
            return "rgb(\(red),\(green),70)"
        }
        var svg = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(width)" height="\(height)" font-family="sans-serif" font-size="12">
            <rect width="100%" height="100%" fill="white"/>
            <text x="\(left)" y="24" font-size="16" font-weight="bold">\(escape(title))</text>
            <text x="\(left)" y="44">goodput per setting (best window shown); red cells lost ≥ 1 % of packets; outlined: the choice</text>

            """
        for (index, delay) in columns.enumerated() {
            svg += "<text x=\"\(left + index * cellWidth + cellWidth / 2)\" y=\"\(top - 8)\" text-anchor=\"middle\">\(Double(delay) / 1000) ms</text>\n"
        }
        svg += "<text x=\"\(left + columns.count * cellWidth / 2)\" y=\"\(top + rows.count * cellHeight + 24)\" text-anchor=\"middle\">inter-packet delay</text>\n"
        svg +=
            "<text x=\"20\" y=\"\(top + rows.count * cellHeight / 2)\" transform=\"rotate(-90 20 \(top + rows.count * cellHeight / 2))\" text-anchor=\"middle\">packet size (bytes)</text>\n"
        for (row, size) in rows.enumerated() {
            let y = top + row * cellHeight
            svg += "<text x=\"\(left - 8)\" y=\"\(y + cellHeight / 2 + 4)\" text-anchor=\"end\">\(size)</text>\n"
            for (column, delay) in columns.enumerated() {
                let x = left + column * cellWidth
                guard let trial = best["\(size)/\(delay)"] else {
                    svg += "<rect x=\"\(x)\" y=\"\(y)\" width=\"\(cellWidth - 2)\" height=\"\(cellHeight - 2)\" fill=\"#eeeeee\"/>"
                    svg += "<text x=\"\(x + cellWidth / 2)\" y=\"\(y + cellHeight / 2 + 4)\" text-anchor=\"middle\" fill=\"#999999\">not tried</text>\n"
                    continue
                }
                let lossy = trial.loss >= TuningSearch.acceptableLoss
                let fill = lossy ? "rgb(235,140,140)" : colour(trial.goodput / top1)
                svg += "<rect x=\"\(x)\" y=\"\(y)\" width=\"\(cellWidth - 2)\" height=\"\(cellHeight - 2)\" fill=\"\(fill)\"/>"
                svg += "<text x=\"\(x + cellWidth / 2)\" y=\"\(y + 20)\" text-anchor=\"middle\" font-weight=\"bold\">\(escape(formatBytes(Int(trial.goodput))))/s</text>"
                svg += "<text x=\"\(x + cellWidth / 2)\" y=\"\(y + 36)\" text-anchor=\"middle\">\(String(format: "loss %.1f %%", trial.loss * 100))</text>"
                svg += "<text x=\"\(x + cellWidth / 2)\" y=\"\(y + 50)\" text-anchor=\"middle\" fill=\"#333333\">window \(trial.point.window)</text>\n"
            }
        }
        if let row = rows.firstIndex(of: chosen.point.packetSize), let column = columns.firstIndex(of: chosen.point.delayMicroseconds) {
            svg +=
                "<rect x=\"\(left + column * cellWidth - 2)\" y=\"\(top + row * cellHeight - 2)\" width=\"\(cellWidth + 2)\" height=\"\(cellHeight + 2)\" fill=\"none\" stroke=\"black\" stroke-width=\"4\"/>\n"
        }
        svg +=
            "<text x=\"\(left)\" y=\"\(top + rows.count * cellHeight + 50)\">chosen: \(escape(chosen.point.description)) — \(escape(formatBytes(Int(chosen.goodput))))/s, \(String(format: "%.1f", chosen.loss * 100)) % loss; \(trials.count) trials of \(space.count)</text>\n"
        svg += "</svg>\n"
        return svg
    }
}
