import BleotaEngine
import Foundation
import Glibc
import Testing

@testable import BleotaCommands

/// Ctrl-C during a flash: the progress line ends, the message says where the
/// transfer was and what the device runs, and the exit status (130) is documented.
@Suite struct InterruptionCLITests {
    /// Reads `handle` line by line until one satisfies `condition`; returns everything read.
    static func read(_ handle: FileHandle, until condition: (String) -> Bool) -> String {
        var text = ""
        while !text.split(separator: "\n").contains(where: { condition(String($0)) }) {
            let chunk = handle.availableData
            guard !chunk.isEmpty else { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        return text
    }

    /// Ctrl-C, and SIGTERM (what kill, systemd and CI runners send), stop alike.
    @Test(arguments: [SIGINT, SIGTERM])
    func anInterruptDuringTheTransferSaysTheDeviceKeepsItsOldImage(signal: Int32) throws {
        // A device in real time behind a slow link (2.6 KiB/s), so the transfer lasts seconds.
        let server = try ServedDevice.start(["--protocol", "native", "--udp", "127.0.0.1:0", "--link", "1m-no-dle-30ms", "--duration", "120"])
        defer { server.stop() }
        let port = try server.port()

        let flash = Process()
        flash.executableURL = BleotaProcess.executable
        flash.arguments = [
            "flash", "samples/firmware/blinky.bin", "--device", "udp://127.0.0.1:\(port)", "--protocol", "native",
            "--version-label", "2.0.0",
        ]
        flash.currentDirectoryURL = BleotaProcess.repositoryRoot
        flash.environment = ProcessInfo.processInfo.environment.merging([
            "XDG_CONFIG_HOME": BleotaProcess.configHome.path, "XDG_DATA_HOME": BleotaProcess.configHome.appendingPathComponent("data-interrupted").path,
        ]) { $1 }
        let out = Pipe(), err = Pipe()
        flash.standardOutput = out
        flash.standardError = err
        try flash.run()
        // Not a terminal: a line per step, and per tenth of the transfer. Ctrl-C once a tenth is through.
        let before = Self.read(err.fileHandleForReading) { $0.hasPrefix("progress: transfer [") }
        try #require(before.contains("progress: transfer ["), "\(before)")
        kill(flash.processIdentifier, signal)
        let stderr = before + String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        _ = out.fileHandleForReading.readDataToEndOfFile()
        flash.waitUntilExit()
        #expect(flash.terminationReason == .exit && flash.terminationStatus == 130, "\(stderr)")
        let line = try #require(stderr.split(separator: "\n").last.map(String.init), "\(stderr)")
        #expect(line.hasPrefix("error: interrupted while transferring ("), "\(line)")
        #expect(line.hasSuffix("sent): nothing was activated, so the device keeps its old image; flash again to update it"), "\(line)")
        // One line, nothing after it: the step lines before it each ended.
        #expect(stderr.hasSuffix(line + "\n"))
        // The stop is not taken for a dropped link to mend ("link lost (CancellationError()); reconnecting").
        #expect(!stderr.contains("link lost"), "\(stderr)")
    }

    /// Two interrupts close together (a signal to the process and one to its group): whichever way it
    /// ends, --json's stdout is one JSON document, which it was not in 1 of 3 runs when the second
    /// interrupt ended the process at once.
    @Test func twoInterruptsStillLeaveOneJSONDocument() throws {
        // A device in real time behind a slow link, so the transfer lasts seconds.
        let server = try ServedDevice.start(["--protocol", "native", "--udp", "127.0.0.1:0", "--link", "1m-no-dle-30ms", "--duration", "120"])
        defer { server.stop() }
        let port = try server.port()
        for run in 0..<3 {
            let flash = Process()
            flash.executableURL = BleotaProcess.executable
            // --log-level info: with --json, the log on stderr is what says the transfer began.
            flash.arguments = [
                "flash", "samples/firmware/blinky.bin", "--device", "udp://127.0.0.1:\(port)", "--protocol", "native", "--version-label", "2.\(run).0",
                "--json", "--log-level", "info",
            ]
            flash.currentDirectoryURL = BleotaProcess.repositoryRoot
            flash.environment = ProcessInfo.processInfo.environment.merging([
                "XDG_CONFIG_HOME": BleotaProcess.configHome.path,
                "XDG_DATA_HOME": BleotaProcess.configHome.appendingPathComponent("data-twice").path,
            ]) { $1 }
            let out = Pipe(), err = Pipe()
            flash.standardOutput = out
            flash.standardError = err
            try flash.run()
            let began = Self.read(err.fileHandleForReading) { $0.contains("sending the whole image") }
            try #require(began.contains("sending the whole image"), "run \(run): \(began)")
            kill(flash.processIdentifier, SIGINT)
            kill(flash.processIdentifier, SIGINT)
            let stdout = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            _ = err.fileHandleForReading.readDataToEndOfFile()
            flash.waitUntilExit()
            // 130, or (the second interrupt ending it at once) the signal itself, which a shell also shows as 130.
            let ended =
                (flash.terminationReason == .exit && flash.terminationStatus == 130)
                || (flash.terminationReason == .uncaughtSignal && flash.terminationStatus == SIGINT)
            #expect(ended, "run \(run): \(flash.terminationReason) \(flash.terminationStatus)")
            let document = try? JSONSerialization.jsonObject(with: Data(stdout.utf8)) as? [String: Any]
            #expect((document?["error"] as? String)?.hasPrefix("interrupted") == true, "run \(run): \(stdout)")
        }
    }

    /// A second interrupt ends at once; the line it leaves says what is then unknown, by step.
    @Test func aSecondInterruptSaysWhatIsUnknown() {
        let transfer = endedAtOnce(at: (.transfer, nil), activates: true)
        #expect(transfer.hasPrefix("interrupted again while transferring, so bleota ended at once: nothing was activated"), "\(transfer)")
        let activate = endedAtOnce(at: (.activate, nil), activates: true)
        #expect(activate.contains("whether the device runs the new image or the old one is unknown"), "\(activate)")
        let pull = endedAtOnce(at: (.transfer, nil), activates: false)
        #expect(pull.hasSuffix("nothing was stored or written; run the command again"))
    }

    /// What --json carries for an interruption, at each point of an update.
    @Test func theReportNamesTheStepAndWhatTheDeviceRuns() throws {
        let progress = TransferProgress(
            bytesAcknowledged: 4096, totalBytes: 16384, packetsSent: 20, packetsResent: 0, packetsLost: 0,
            elapsed: .seconds(1), window: 4, interPacketDelay: .zero)
        let early = interruption(at: (.transfer, progress), activates: true)
        #expect(early.status == .interrupted && early.status.rawValue == 130)
        #expect(early.message == "interrupted while transferring (25% of 16.0 KiB sent): nothing was activated, so the device keeps its old image; flash again to update it")
        let late = interruption(at: (.activate, progress), activates: true)
        #expect(late.details?.deviceState == "unknown" && late.details?.step == "activate")
        #expect(late.message.contains("the activation may have reached the device"))
        let push = interruption(at: (.transfer, nil), activates: false)
        #expect(push.details?.deviceState == nil && push.message == "interrupted while transferring: nothing was stored or written; run the command again")
        let json = try JSONSerialization.jsonObject(with: Data(try JSONOutput.string(FailureReport(early)).utf8)) as? [String: Any]
        #expect(json?["exitStatus"] as? Int == 130 && json?["code"] as? String == "interrupted" && json?["deviceState"] as? String == "old-image")
        #expect(json?["step"] as? String == "transfer")
    }
}
