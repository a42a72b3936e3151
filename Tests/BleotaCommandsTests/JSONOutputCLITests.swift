import Foundation
import Testing

/// The JSON convention (README, "JSON and units"): a command's result is exactly one document on
/// stdout, failures included, and a failure has the same keys everywhere; streams are JSON Lines.
@Suite struct JSONOutputCLITests {
    static let failureKeys: Set<String> = ["error", "code", "step", "exitStatus"]

    static func document(_ text: String) throws -> Any {
        try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
    }

    /// Each command with `--json`, once succeeding and once failing (with the status it fails with).
    @Test(
        arguments: [
            (["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--no-saved-tuning"], 0),
            (["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle?verify-fail=1"], 2),
            (["flash", "samples/firmware/nope.bin", "--device", "sim://2m-dle"], 3),
            (["flash", "samples/firmware/blinky.bin"], 2),
            (["push", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--name", "b.bin", "--no-saved-tuning"], 0),
            (["pull", "hello.txt", "--device", "sim://2m-dle", "-o", "/nonexistent-dir/x.txt"], 3),
            (["image", "info", "samples/firmware/blinky.hex"], 0),
            (["image", "info", "samples/firmware/nope.hex"], 3),
            (["image", "state", "--device", "sim://2m-dle?protocol=smp"], 0),
            (["sim", "presets"], 0),
            (["protocols"], 0),
            (["bond", "pair", "--device", "sim://2m-dle"], 2),
            (["gatt", "discover", "--device", "sim://2m-dle"], 2),
        ] as [([String], Int32)])
    func oneDocumentPerCommand(arguments: [String], status: Int32) throws {
        let run = try BleotaProcess.run(arguments + ["--json"])
        #expect(run.status == status, "\(arguments): \(run.stderr)")
        let parsed = try Self.document(run.stdout)
        guard status != 0 else { return }
        let failure = try #require(parsed as? [String: Any], "\(arguments): a failure is one object: \(run.stdout)")
        #expect(Self.failureKeys.isSubset(of: Set(failure.keys)), "\(arguments): \(failure.keys.sorted())")
        #expect(failure["exitStatus"] as? Int == Int(status))
    }

    /// `fleet flash --json` is JSON Lines: every line one object, the summary last, on one line too.
    @Test func aFleetStreamIsJSONLines() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-jsonl-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let list = directory.appendingPathComponent("devices.txt")
        try "sim://2m-dle?seed=1\nsim://2m-dle?seed=2\n".write(to: list, atomically: true, encoding: .utf8)
        let run = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n")
        #expect(lines.count > 2)
        for line in lines { #expect((try? Self.document(String(line))) is [String: Any], "not one object: \(line)") }
        let last = try #require(try Self.document(String(lines.last ?? "")) as? [String: Any])
        #expect(last["event"] as? String == "summary")
    }
}
