import BleotaEngine
import BleotaFleet
import Foundation
import Synchronization

/// What a fleet run shows: on a terminal a table redrawn in place (one row per
/// device: step, percent, rate, resends, result) and a summary line; with
/// `--json` one JSON line per event on stdout and the summary last; otherwise
/// one line per finished device.
final class FleetDisplay: Sendable {
    struct Row {
        var label: String
        var adapter = ""
        var step = "waiting"
        var percent: Int?
        var rate: Double = 0
        var resends = 0
        var result = ""
    }

    struct State {
        var rows: [Row]
        var index: [String: Int]
        var drawnLines = 0
        var lastDraw = Date.distantPast
        var notes: [String] = []
    }

    let json: Bool
    let live: Bool
    private let state: Mutex<State>

    init(devices: [FleetDevice], json: Bool, live: Bool) {
        self.json = json
        self.live = live
        var index: [String: Int] = [:]
        for (position, device) in devices.enumerated() { index[device.address] = position }
        state = Mutex(State(rows: devices.map { Row(label: $0.label) }, index: index))
    }

    func handle(_ event: FleetEvent) {
        if json {
            if let line = try? JSONOutput.string(FleetEventLine(event), pretty: false) { Terminal.standardOutput.writeLine(line) }
            return
        }
        let finished: DeviceResult? = state.withLock { state in
            switch event {
            case .started(let device, let adapter, let attempt):
                // A campaign worker learns its devices as it claims them.
                if state.index[device.address] == nil {
                    state.index[device.address] = state.rows.count
                    state.rows.append(Row(label: device.label))
                }
                update(&state, device.address) { row in
                    row.adapter = adapter
                    row.step = attempt > 1 ? "try \(attempt)" : "connect"
                    row.result = ""
                }
            case .step(let device, let step):
                update(&state, device.address) { $0.step = step.rawValue }
            case .progress(let device, let acknowledged, let total, let rate, let resends):
                update(&state, device.address) { row in
                    row.percent = total > 0 ? min(100, acknowledged * 100 / total) : nil
                    row.rate = rate
                    row.resends = resends
                }
            case .retrying(let device, let error, let delay):
                update(&state, device.address) { row in
                    row.step = "retry in \(Int(Double(delay.components.seconds).rounded())) s"
                    row.result = "\(error.step): \(error.message)"
                }
            case .queued(let device):
                update(&state, device.address) { $0.step = "queued" }
            case .note(let device, let text):
                state.notes.append("\(device.label): \(text)")
            case .finished(let result):
                update(&state, result.device) { row in
                    row.step = result.outcome.rawValue
                    row.adapter = result.adapter ?? row.adapter
                    row.resends = result.resends
                    if result.outcome == .updated { row.percent = 100 }
                    row.result = Self.describe(result)
                }
                return result
            case .stopping:
                // Ctrl-C's own note says it already, with how to end at once.
                if !state.notes.contains(where: { $0.hasPrefix("stopping:") }) { state.notes.append("stopping: no new device starts") }
            }
            return nil
        }
        if live {
            redraw(force: finished != nil)
        } else if let finished {
            Terminal.standardError.writeLine("\(finished.label): \(Self.describe(finished))")
        }
    }

    /// A line outside the table (Ctrl-C's message).
    func note(_ text: String) {
        guard !json else { return }
        state.withLock { $0.notes.append(text) }
        if live {
            redraw(force: true)
        } else {
            Terminal.standardError.writeLine(text)
        }
    }

    /// The lines shown under the table, oldest first.
    var notes: [String] { state.withLock { $0.notes } }

    func finish(_ summary: FleetSummary) {
        if json {
            struct Line: Codable {
                var event = "summary"
                var summary: FleetSummary
            }
            if let line = try? JSONOutput.string(Line(summary: summary), pretty: false) { Terminal.standardOutput.writeLine(line) }
            return
        }
        if live { redraw(force: true) }
        // When some device does not run the image, the command's one-line error says the same.
        if summary.allSucceeded { Terminal.standardOutput.writeLine(summary.sentence) }
    }

    static func describe(_ result: DeviceResult) -> String {
        switch result.outcome {
        case .updated:
            return "updated to \(result.versionAfter ?? "the image") in \(Int(result.seconds.rounded())) s" + (result.attempts > 1 ? " (\(result.attempts) tries)" : "")
        case .skipped:
            return "already runs \(result.versionAfter ?? "the image")"
        case .failed:
            return "failed at \(result.step ?? "?"): \(result.error ?? "")" + (result.deviceState.map { " [\($0)]" } ?? "")
        case .notStarted:
            return "not started"
        case .otherVersion:
            return "left alone: runs \(result.versionBefore ?? "an unknown version"), not --from-version"
        }
    }

    private func update(_ state: inout State, _ address: String, _ change: (inout Row) -> Void) {
        guard let index = state.index[address] else { return }
        change(&state.rows[index])
    }

    /// Redraws the table in place, at most five times a second unless `force`.
    private func redraw(force: Bool) {
        let text: String? = state.withLock { state in
            let now = Date()
            guard force || now.timeIntervalSince(state.lastDraw) >= 0.2 else { return nil }
            state.lastDraw = now
            var lines: [String] = []
            let width = max(6, state.rows.map(\.label.count).max() ?? 6)
            // The result column gets what the terminal has left; a cut cell ends with "…" (the whole
            // text is in --report and --log-dir).
            let resultWidth = max(20, (Terminal.standardError.columns ?? 160) - (width + 2 + 7 + 2 + 16 + 2 + 4 + 2 + 10 + 2 + 6 + 2) - 1)
            lines.append(
                pad("device", width) + "  " + pad("adapter", 7) + "  " + pad("step", 16) + "  " + pad("done", 4) + "  "
                    + pad("rate", 10) + "  " + pad("resent", 6) + "  result")
            for row in state.rows {
                let percent = row.percent.map { "\($0)%" } ?? ""
                let rate = row.rate > 0 ? formatBytes(Int(row.rate)) + "/s" : ""
                lines.append(
                    pad(row.label, width) + "  " + pad(row.adapter, 7) + "  " + pad(row.step, 16) + "  " + pad(percent, 4) + "  "
                        + pad(rate, 10) + "  " + pad(String(row.resends), 6) + "  " + Self.cut(row.result, to: resultWidth))
            }
            lines += state.notes.suffix(3)
            // Back up over what was drawn last time, then draw again.
            let up = state.drawnLines > 0 ? "\u{1B}[\(state.drawnLines)A" : ""
            state.drawnLines = lines.count
            return up + lines.map { "\u{1B}[2K" + $0 }.joined(separator: "\n") + "\n"
        }
        if let text { Terminal.standardError.write(text) }
    }

    /// `text` in at most `width` characters, ending with "…" where it was cut.
    static func cut(_ text: String, to width: Int) -> String {
        text.count <= width ? text : String(text.prefix(max(0, width - 1))) + "…"
    }

    private func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }
}

extension DeviceAddress {
    /// A `ble://` address that names no adapter, made to go through `adapter`; others as they are.
    func through(adapter: String) throws -> DeviceAddress {
        guard case .ble(let target) = try kind(), target.adapter == nil else { return self }
        guard let address = DeviceAddress(argument: text + (text.contains("?") ? "&" : "?") + "adapter=" + adapter) else { return self }
        return address
    }
}
