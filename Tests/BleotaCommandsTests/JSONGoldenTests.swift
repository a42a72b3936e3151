import BleotaCommands
import Foundation
import Testing

/// `--json` documents whose every byte is fixed by their input, run in-process, against the text kept in
/// `Golden/json/`: a renamed key, a changed unit or a second document shows up in review as a change
/// to these files. Regenerate after an intended change with `BLEOTA_UPDATE_GOLDEN=1 swift test
/// --filter JSONGoldenTests` and read the diff.
@Suite struct JSONGoldenTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden/json")

    @Test(
        arguments: [
            ("image-info-intel-hex", ["image", "info", "samples/firmware/blinky.hex"], Int32(0)),
            ("image-info-mcuboot", ["image", "info", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin"], 0),
            ("image-info-nordic-package", ["image", "info", "Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip"], 0),
            ("protocols", ["protocols"], 0),
            ("sim-presets", ["sim", "presets"], 0),
            ("error-missing-image", ["flash", "samples/firmware/nope.bin", "--device", "sim://2m-dle"], 3),
            ("error-usage", ["flash", "samples/firmware/blinky.bin", "--window", "0", "--device", "sim://2m-dle"], 2),
            ("error-image-and-protocol-disagree", ["flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle?protocol=nordic-dfu"], 2),
            ("error-unreadable-time", ["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--connect-timeout", "soon"], 2),
            ("error-fleet-stream", ["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", "/nonexistent.txt"], 3),
        ] as [(String, [String], Int32)])
    func documentMatchesItsGoldenText(name: String, arguments: [String], status: Int32) async throws {
        // In-process: the command runs in this task, its stdout and stderr captured (Terminal.capturing).
        let (exitStatus, output) = await Terminal.capturing { await BleotaCommand.run(arguments: arguments + ["--json"]) }
        let run = (status: exitStatus, stdout: output.standardOutput.contents, stderr: output.standardError.contents)
        #expect(run.status == status, "\(arguments): \(run.stderr)")
        if status != 0 {
            // A failure is also one line on stderr, the same message as the document's.
            let lines = run.stderr.split(separator: "\n").filter { $0.hasPrefix("error: ") }
            #expect(lines.count == 1, "\(run.stderr)")
        }
        let file = Self.directory.appendingPathComponent(name + ".json")
        if ProcessInfo.processInfo.environment["BLEOTA_UPDATE_GOLDEN"] == "1" {
            try FileManager.default.createDirectory(at: Self.directory, withIntermediateDirectories: true)
            try run.stdout.write(to: file, atomically: true, encoding: .utf8)
            return
        }
        let golden = try #require(try? String(contentsOf: file, encoding: .utf8), "no golden JSON \(name): run with BLEOTA_UPDATE_GOLDEN=1")
        #expect(run.stdout == golden, "bleota \(arguments.joined(separator: " ")) --json changed")
    }
}
