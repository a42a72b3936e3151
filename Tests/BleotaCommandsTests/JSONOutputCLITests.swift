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
            (["tune", "--device", "sim://2m-dle", "--no-saved-tuning"], 0),
            (["tune", "--device", "sim://2m-dle", "--trial-bytes", "10"], 2),
            (["echo", "hi", "--device", "sim://2m-dle?protocol=smp"], 0),
            (["echo", "hi", "--device", "sim://2m-dle?protocol=nordic-dfu"], 2),
            (["reset", "--device", "sim://2m-dle?protocol=smp"], 0),
            (["image", "erase", "--device", "sim://2m-dle?protocol=smp"], 0),
            (["image", "convert", "samples/firmware/blinky.hex", "/nonexistent-dir/x.bin"], 3),
            (["image", "state", "--device", "sim://2m-dle?protocol=smp", "--test", "abc"], 2),
            (["bond", "remove", "C0:FF:EE:12:34:56"], 3),
            (["fleet", "status", "--campaign", "postgres://nobody@127.0.0.1:1/x", "--name", "y"], 12),
            (["sim", "presets", "--nonsense"], 2),
            // Every failing status a flash can end with before its activation: refused, link lost, pairing failed.
            (["flash", "samples/firmware/app-v2.bin", "--device", "sim://2m-dle?slot=1024"], 4),
            (["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle?disconnect-prob=1"], 6),
            (["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle?security=high&device-io=yesno"], 13),
            (["delta", "info", "samples/firmware/blinky.hex"], 3),
            // And the two it can end with after: the device runs the new image unconfirmed (its confirm
            // fails every time), and the device did not come back within --connect-timeout (a 60 s swap).
            (["flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle?confirm-fails=1000"], 8),
            (["flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle?swap-time=60000", "--connect-timeout", "5"], 9),
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

    /// A refusal before anything is sent says the device keeps its old image, in deviceState too
    /// (the message said "nothing was sent" and the document had no deviceState).
    @Test(arguments: [
        ("samples/firmware/blinky.bin", "sim://2m-dle?slot=100"),
        ("samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "sim://2m-dle?protocol=smp&slot=100"),
    ])
    func aRefusalBeforeSendingSaysTheDeviceKeepsItsOldImage(image: String, device: String) throws {
        let run = try BleotaProcess.run(["flash", image, "--device", device, "--json"])
        #expect(run.status == 4, "\(run.stderr)")
        let document = try #require(try Self.document(run.stdout) as? [String: Any], "\(run.stdout)")
        #expect((document["error"] as? String)?.contains("nothing was sent") == true, "\(document)")
        #expect(document["deviceState"] as? String == "old-image", "\(document)")
        #expect(document["deviceVersion"] as? String == "1.0.0", "\(document)")
    }

    /// A failure after the activation says what the device runs, and where it failed: the new image
    /// unconfirmed when the confirm cannot be written (exit 8), unknown when the device stays away (exit 9).
    @Test(
        arguments: [
            ("confirm-fails=1000", [], 8, "new-image-unconfirmed", "confirm"),
            ("confirm-fails=1", [], 0, nil, nil),
            ("swap-time=60000", ["--connect-timeout", "5"], 9, "unknown", "reconnect"),
        ] as [(String, [String], Int32, String?, String?)])
    func aLateFailureNamesWhatTheDeviceRuns(faults: String, options: [String], status: Int32, deviceState: String?, step: String?) throws {
        let image = "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin"
        let run = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle?\(faults)", "--json"] + options)
        #expect(run.status == status, "\(faults): \(run.stderr)")
        let document = try #require(try Self.document(run.stdout) as? [String: Any], "\(faults): \(run.stdout)")
        guard status != 0 else {
            // One failed confirm is repeated after reading the slots: the update ends confirmed.
            #expect(document["versionAfter"] as? String == "1.1.0", "\(document)")
            return
        }
        #expect(document["deviceState"] as? String == deviceState, "\(document)")
        #expect(document["step"] as? String == step, "\(document)")
    }

    /// The commands that need a Bluetooth adapter answer with one document either way: their result where
    /// the machine has one, exit 7 and the failure's keys where it has none (as on CI).
    @Test(arguments: [
        ["scan", "--duration", "100ms"],
        ["gatt", "read", "--device", "ble://C0:FF:EE:00:00:01", "--handle", "3", "--connect-timeout", "500ms"],
        ["serve", "--adapter", "hci0", "--duration", "100ms"],
    ])
    func oneDocumentWithOrWithoutBluetooth(arguments: [String]) throws {
        let run = try BleotaProcess.run(arguments + ["--json"])
        let parsed = try Self.document(run.stdout)
        guard run.status != 0 else { return }
        let failure = try #require(parsed as? [String: Any], "\(arguments): a failure is one object: \(run.stdout)")
        #expect(Self.failureKeys.isSubset(of: Set(failure.keys)), "\(arguments): \(failure.keys.sorted())")
        #expect(failure["exitStatus"] as? Int == Int(run.status))
    }

    /// A fleet in which some or all devices fail still streams one object a line, and exits 10 or 11.
    @Test(arguments: [("sim://2m-dle?seed=1\nsim://2m-dle?seed=2&slot=1024\n", Int32(10)), ("sim://2m-dle?slot=1024\n", 11)])
    func aFailingFleetStreamIsJSONLinesToo(list: String, status: Int32) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-jsonl-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("devices.txt")
        try list.write(to: file, atomically: true, encoding: .utf8)
        let run = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", file.path, "--attempts", "1", "--json"])
        #expect(run.status == status, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n")
        for line in lines { #expect((try? Self.document(String(line))) is [String: Any], "not one object: \(line)") }
        // The summary, then the failure as the stream's last line, with every failure's keys.
        let summary = try #require(try Self.document(String(lines.dropLast().last ?? "")) as? [String: Any])
        #expect(summary["event"] as? String == "summary")
        let failure = try #require(try Self.document(String(lines.last ?? "")) as? [String: Any])
        #expect(failure["event"] as? String == "failure")
        #expect(Self.failureKeys.isSubset(of: Set(failure.keys)) && failure["exitStatus"] as? Int == Int(status), "\(failure)")
        // A device refused before anything was sent says what it runs (issue 48, item 15).
        let refused = try lines.compactMap { try Self.document(String($0)) as? [String: Any] }
            .first { $0["event"] as? String == "finished" && ($0["device"] as? String)?.contains("slot=1024") == true }
        let result = try #require(refused?["result"] as? [String: Any])
        #expect(result["outcome"] as? String == "failed")
        #expect(result["deviceState"] as? String == "old-image", "\(result)")
    }

    /// A fleet that cannot start (a usage error, a bad device list) answers in its stream's form too: one line.
    @Test func aFleetThatCannotStartFailsInOneLine() throws {
        let run = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", "/nonexistent.txt", "--json"])
        #expect(run.status == 3, "\(run.stderr)")
        let lines = run.stdout.split(separator: "\n")
        #expect(lines.count == 1, "\(run.stdout)")
        let failure = try #require(try Self.document(String(lines.first ?? "")) as? [String: Any])
        #expect(failure["event"] as? String == "failure" && failure["exitStatus"] as? Int == 3)
        let usage = try BleotaProcess.run(["fleet", "flash", "--json"])
        #expect(usage.status == 2 && usage.stdout.split(separator: "\n").count == 1, "\(usage.stdout)")
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
