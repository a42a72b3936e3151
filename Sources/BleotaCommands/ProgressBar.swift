import BleotaEngine
import Foundation
import Synchronization

/// Renders update progress for a person.
///
/// On a terminal: one line redrawn in place with the step, a bar, bytes,
/// percent, rate, ETA and resends. Not on a terminal (CI logs, pipes): one line
/// per step and a final summary, never carriage returns. Silent with `--json`
/// (the summary goes to stdout as JSON instead) and with `--quiet`.
final class ProgressReporter: Sendable {
    enum Style { case interactive, lines, silent }

    private struct State {
        var step: UpdateStep?
        var progress: TransferProgress?
        /// In line mode, the last tenth of the transfer a `progress:` line was written for.
        var lastTenth = 0
        var lastDraw: Double = -1
        var lastLine = ""
    }

    private let style: Style
    private let terminal: Terminal
    private let state = Mutex(State())
    private let started = Date()

    init(style: Style, terminal: Terminal = .standardError) {
        self.style = style
        self.terminal = terminal
    }

    static func automatic(json: Bool, quiet: Bool) -> ProgressReporter {
        if json || quiet { return ProgressReporter(style: .silent) }
        return ProgressReporter(style: Terminal.standardError.isInteractive ? .interactive : .lines)
    }

    func handle(_ event: UpdateEvent) {
        switch event {
        case .step(let step):
            state.withLock {
                $0.step = step
                $0.lastTenth = 0
            }
            switch style {
            case .interactive: terminal.write("\r\u{1B}[2K\(Self.label(step))…")
            case .lines: terminal.writeLine("step: \(step)")
            case .silent: break
            }
        case .note(let note):
            switch style {
            case .interactive: terminal.write("\r\u{1B}[2K\(note)\n")
            case .lines: terminal.writeLine("note: \(note)")
            case .silent: break
            }
        case .progress(let progress):
            // Not a terminal (a log, CI): a line at each tenth of the transfer, with rate and ETA.
            let progressLine: String? = state.withLock { state in
                state.progress = progress
                let tenth = Int((min(1, max(0, progress.fraction)) * 10).rounded(.down))
                guard style == .lines, tenth > state.lastTenth else { return nil }
                state.lastTenth = tenth
                return "progress: " + Self.render(progress, step: state.step ?? .transfer)
            }
            if let progressLine { terminal.writeLine(progressLine) }
            guard style == .interactive else { return }
            let line: String? = state.withLock { state in
                let wall = Date().timeIntervalSince(started)
                // Redraw at most 20 times a second, and always at 100 %.
                guard wall - state.lastDraw >= 0.05 || progress.bytesAcknowledged == progress.totalBytes else { return nil }
                state.lastDraw = wall
                return Self.render(progress, step: state.step ?? .transfer)
            }
            if let line { terminal.write("\r\u{1B}[2K" + line) }
        }
    }

    /// The step reached and the transfer's last progress: what an interruption reports.
    var position: (step: UpdateStep?, progress: TransferProgress?) { state.withLock { ($0.step, $0.progress) } }

    /// Ends the in-place line so what follows starts on a fresh one.
    func finish() {
        if style == .interactive { terminal.write("\n") }
    }

    static func label(_ step: UpdateStep) -> String {
        switch step {
        case .load: "loading"
        case .connect: "connecting"
        case .enterBootloader: "entering bootloader"
        case .reconnect: "reconnecting"
        case .transfer: "transferring"
        case .verify: "verifying"
        case .activate: "activating"
        case .confirm: "confirming"
        case .store: "storing"
        }
    }

    /// `transfer [#########-----------]  45%  46.1/102.4 KiB  12.3 KiB/s  ETA 4s  resent 3`
    static func render(_ progress: TransferProgress, step: UpdateStep, width: Int = 24) -> String {
        let fraction = min(1, max(0, progress.fraction))
        let filled = Int((fraction * Double(width)).rounded(.down))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let seconds = progress.elapsed.seconds
        let rate = seconds > 0 ? Double(progress.bytesAcknowledged) / seconds : 0
        let remaining = progress.totalBytes - progress.bytesAcknowledged
        let eta = rate > 0 ? formatDuration(Double(remaining) / rate) : "--"
        return "\(step) [\(bar)] \(String(format: "%3d%%", Int(fraction * 100)))  "
            + "\(formatBytes(progress.bytesAcknowledged))/\(formatBytes(progress.totalBytes))  "
            + "\(formatBytes(Int(rate)))/s  ETA \(eta)  resent \(progress.packetsResent)"
    }
}

func formatBytes(_ bytes: Int) -> String { ByteCount.text(bytes) }

func formatDuration(_ seconds: Double) -> String {
    if seconds < 1 { return String(format: "%.0f ms", seconds * 1000) }
    if seconds < 60 { return String(format: "%.1f s", seconds) }
    let whole = Int(seconds.rounded())
    return "\(whole / 60)m\(String(format: "%02d", whole % 60))s"
}
