import Foundation
import Testing

/// `bleota fleet flash` as a user runs it: a device list, several simulated
/// adapters, the report, the JSON event stream and the exit status.
@Suite struct FleetCLITests {
    func temporaryFile(_ name: String, _ text: String) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-fleet-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let url = directory.appendingPathComponent(name)
        try text.write(to: url, atomically: true, encoding: .utf8)
        return url
    }

    @Test func aFleetOfSimulatedDevicesIsUpdatedAndReported() throws {
        let list = try temporaryFile("devices.txt", (1...6).map { "sim://\($0 % 3 == 0 ? "slow-flash" : "2m-dle")?seed=\($0)" }.joined(separator: "\n"))
        let report = list.deletingLastPathComponent().appendingPathComponent("report.csv")
        let result = try BleotaProcess.run([
            "fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--adapter", "sim0", "--adapter", "sim1",
            "--version-label", "2.0.0", "--report", report.path, "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        let events = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(events.count == lines.count, "every stdout line is one JSON object")
        #expect(events.filter { $0["event"] as? String == "finished" }.count == 6)
        #expect(Set(events.compactMap { $0["adapter"] as? String }) == ["sim0", "sim1"], "devices were spread over both adapters")
        let summary = try #require(events.last?["summary"] as? [String: Any])
        #expect(summary["updated"] as? Int == 6 && summary["failed"] as? Int == 0)
        let csv = try String(contentsOf: report, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(csv.first == "device,label,adapter,outcome,version_before,version_after,seconds,bytes,resends,attempts,error_step,error,device_state,air_bytes")
        #expect(csv.count == 7)
        #expect(csv.dropFirst().allSatisfy { $0.contains(",updated,1.0.0,2.0.0,") }, "\(csv)")
        // Whole images went: what went over the air is each image's bytes.
        let fields = csv.dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false) }
        #expect(fields.allSatisfy { $0.count == 14 && $0[13] == $0[7] && Int($0[7]) ?? 0 > 0 }, "\(csv)")
    }

    @Test func someFailedIsExitTenWithTheStepInTheReport() throws {
        let list = try temporaryFile(
            "devices.csv",
            """
            device,label
            sim://2m-dle?seed=1,good
            sim://2m-dle?seed=2&slot=4096,too-small
            """)
        let report = list.deletingLastPathComponent().appendingPathComponent("report.json")
        let result = try BleotaProcess.run([
            "fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path,
            "--report", report.path, "--quiet",
        ])
        #expect(result.status == 10, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("error: 1 of 2 devices run the target (1 updated, 0 already did), 1 failed"), "\(result.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: report)) as? [String: Any])
        let devices = try #require(document["devices"] as? [[String: Any]])
        #expect(devices.map { $0["label"] as? String } == ["good", "too-small"])
        #expect(devices[0]["outcome"] as? String == "updated")
        #expect(devices[1]["outcome"] as? String == "failed" && devices[1]["step"] as? String != nil, "\(devices[1])")
        // A failure's keys are every command's (code, step), and 0.1.0's errorStep is kept for one release.
        #expect(devices[1]["code"] as? String != nil && devices[1]["errorStep"] as? String == devices[1]["step"] as? String, "\(devices[1])")
        #expect(devices[1]["attempts"] as? Int == 1, "a refusal is not tried again")
    }

    /// `--from-version`: a device that runs another version is left alone (nothing sent) and
    /// reported as such, not as failed; the fleet exits 0. Native devices say their version in their
    /// hello, SMP devices in their slot list; a protocol that cannot say is refused at once.
    @Test func fromVersionUpdatesOnlyTheCohortAndLeavesTheRestAlone() throws {
        let list = try temporaryFile(
            "devices.csv",
            """
            device,label
            sim://2m-dle?seed=1,one-oh
            sim://2m-dle?seed=2&version=1.1.0,one-one
            sim://2m-dle?seed=3&version=0.9.0,old
            """)
        let report = list.deletingLastPathComponent().appendingPathComponent("report.json")
        let result = try BleotaProcess.run([
            "fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--version-label", "2.0.0",
            "--from-version", "1.0.0", "--from-version", "1.1.0", "--report", report.path, "--quiet",
        ])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(
            result.stdout.contains("2 of 3 devices run the target (2 updated, 0 already did), 1 run another version (not --from-version), left alone"),
            "\(result.stdout)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: report)) as? [String: Any])
        let devices = try #require(document["devices"] as? [[String: Any]])
        #expect(devices.map { $0["outcome"] as? String } == ["updated", "updated", "other-version"], "\(devices)")
        #expect(devices.map { $0["versionBefore"] as? String } == ["1.0.0", "1.1.0", "0.9.0"])
        #expect(devices[2]["bytes"] as? Int == 0 && devices[2]["airBytes"] == nil && devices[2]["attempts"] as? Int == 1, "\(devices[2])")
        #expect((devices[2]["error"] as? String)?.contains("the device runs 0.9.0, not one of --from-version 1.0.0, 1.1.0: nothing was sent") == true)
        #expect((document["summary"] as? [String: Any])?["otherVersion"] as? Int == 1)

        // SMP: the version is the running slot's.
        let smp = try temporaryFile("smp.txt", "sim://2m-dle?protocol=smp&seed=4\nsim://2m-dle?protocol=smp&seed=5&version=0.5.0\n")
        let mcuboot = try BleotaProcess.run([
            "fleet", "flash", "samples/cortex-m/gcc-arm-none-eabi-12.2.1/sensor-hub-2.0.0-mcuboot-ecdsa-p256.bin", "--devices", smp.path,
            "--from-version", "1.0.0", "--json",
        ])
        #expect(mcuboot.status == 0, "\(mcuboot.stderr)")
        let finished = mcuboot.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .filter { $0["event"] as? String == "finished" }
        let outcomes = finished.compactMap { ($0["result"] as? [String: Any]).map { ($0["versionBefore"] as? String ?? "?", $0["outcome"] as? String ?? "?") } }
        #expect(Set(outcomes.map { "\($0.0) \($0.1)" }) == ["1.0.0 updated", "0.5.0 other-version"], "\(finished)")

        // A protocol that learns the version only once the update is under way cannot take it.
        let refused = try BleotaProcess.run([
            "fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--protocol", "suota", "--from-version", "1.0.0",
        ])
        #expect(refused.status == 2)
        #expect(
            refused.stderr
                == "error: --from-version needs each device's version before anything is sent, which suota devices do not report: leave out --from-version, or use a protocol that can (bleota protocols: 'update only given versions')\n",
            "\(refused.stderr)")
        let blank = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--from-version", "1.0 beta"])
        #expect(blank.status == 2 && blank.stderr.contains("--from-version '1.0 beta' is not a version"), "\(blank.stderr)")
    }

    /// A device list's passkeys and `bonded`, in a fleet of devices that demand authenticated
    /// pairing: each device is answered its own; one that cannot be paired fails alone, with exit
    /// 13's reason and code `pairingFailed`, tried once; the others are updated.
    @Test func eachDeviceIsPairedWithItsOwnPasskeyAndOneThatCannotBeFailsAlone() throws {
        let list = try temporaryFile(
            "devices.csv",
            """
            device,label,passkey,bonded
            sim://2m-dle?security=authenticated&seed=1,right,123456,
            sim://2m-dle?security=authenticated&seed=2&device-passkey=000042,own,42,
            sim://2m-dle?security=authenticated&seed=3,wrong,654321,
            sim://2m-dle?security=authenticated&seed=4,none,,
            sim://2m-dle?security=authenticated&seed=5,bonded,,yes
            sim://2m-dle?seed=6,open,,
            """)
        let report = list.deletingLastPathComponent().appendingPathComponent("report.json")
        let result = try BleotaProcess.run([
            "fleet", "flash", "samples/firmware/blinky.bin", "--devices", list.path, "--report", report.path, "--quiet",
        ])
        #expect(result.status == 10, "\(result.stdout)\(result.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: report)) as? [String: Any])
        let devices = try #require(document["devices"] as? [[String: Any]])
        let outcome = Dictionary(uniqueKeysWithValues: devices.map { ($0["label"] as? String ?? "?", $0) })
        for label in ["right", "own", "open"] { #expect(outcome[label]?["outcome"] as? String == "updated", "\(label): \(outcome[label] ?? [:])") }
        for (label, says) in [
            ("wrong", "pairing failed at the device: confirm value failed (the passkeys did not match)"),
            ("none", "the device asks for a passkey"),
            ("bonded", "the device list says this device is bonded, and this host holds no bond with it, so it is not paired anew"),
        ] {
            let failed = try #require(outcome[label])
            #expect(failed["outcome"] as? String == "failed" && failed["code"] as? String == "pairingFailed", "\(label): \(failed)")
            #expect((failed["error"] as? String)?.contains(says) == true, "\(label): \(failed)")
            #expect(failed["attempts"] as? Int == 1, "\(label): a pairing that failed is not tried again")
        }
        #expect((outcome["none"]?["error"] as? String)?.hasSuffix("(in a fleet: the device list's passkey column, or bonded=yes for a device paired before)") == true)
    }

    @Test func aBadListIsOneLineNamingTheLineExitThree() throws {
        let list = try temporaryFile("devices.txt", "sim://2m-dle?seed=1\nsim://2m-dle?seed=2 sim://2m-dle?seed=3\n")
        let result = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path])
        #expect(result.status == 3)
        #expect(
            result.stderr
                == "error: \(list.path):2: 'sim://2m-dle?seed=2 sim://2m-dle?seed=3' is not one address: write one a line, or a CSV with a header line naming a 'device' column\n")
    }

    /// An address that does not parse is named with its file and line (not as a `--device` the user never gave).
    @Test func aBadAddressInAListNamesItsLine() throws {
        let list = try temporaryFile("bad-address.txt", "sim://2m-dle?seed=1\n# a comment\nnonsense\n")
        let result = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path])
        #expect(result.status == 3)
        #expect(
            result.stderr
                == "error: \(list.path):3: 'nonsense' is not a device address: use sim://PRESET, ble://AA:BB:CC:DD:EE:FF, udp://HOST[:PORT] or serial:///dev/ttyACM0\n")
        let json = try temporaryFile("bad-address.json", #"["sim://2m-dle?seed=1", "ble://zz"]"#)
        let second = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", json.path])
        #expect(second.status == 3)
        #expect(second.stderr.hasPrefix("error: \(json.path): entry 2: 'zz' is not a Bluetooth address"), "\(second.stderr)")
    }

    /// `--log-dir`: one file per device, named by its label (a second device with the same label gets
    /// `-2`), with its steps, its progress and how it ended, including the failing one's reason.
    @Test func logDirHoldsOneLogPerDeviceWithItsStepsAndEnding() throws {
        let list = try temporaryFile(
            "devices.csv",
            """
            device,label
            sim://2m-dle?seed=1,press/1
            sim://2m-dle?seed=2&slot=4096,small
            sim://2m-dle?seed=3,press/1
            """)
        let logs = list.deletingLastPathComponent().appendingPathComponent("logs/run")
        let result = try BleotaProcess.run([
            "fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--version-label", "2.0.0",
            "--log-dir", logs.path, "--quiet",
        ])
        #expect(result.status == 10, "\(result.stderr)")
        let names = try FileManager.default.contentsOfDirectory(atPath: logs.path).sorted()
        #expect(names == ["press_1-2.log", "press_1.log", "small.log"])
        let first = try String(contentsOf: logs.appendingPathComponent("press_1.log"), encoding: .utf8)
        #expect(first.contains("try 1 of sim://2m-dle?seed=1 through sim0"), "\(first)")
        for line in [
            "step connect", "step transfer", "progress 100 % (49152 of 49152 bytes", "step confirm",
            "finished: updated, 1.0.0 → 2.0.0",
        ] {
            #expect(first.contains(line), "\(line) missing from \(first)")
        }
        #expect(!first.contains("seed=3"), "each device's lines stay in its own file")
        let small = try String(contentsOf: logs.appendingPathComponent("small.log"), encoding: .utf8)
        #expect(small.contains("finished: failed") && small.contains("failed at connect: the image is 49152 bytes but the device's slot holds 4096"), "\(small)")
    }

    @Test func aLogDirThatCannotBeADirectoryIsOneLineExitThree() throws {
        let list = try temporaryFile("devices.txt", "sim://2m-dle?seed=1\n")
        let result = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--log-dir", list.path])
        #expect(result.status == 3)
        #expect(result.stderr.hasPrefix("error: --log-dir \(list.path): cannot create the directory"), "\(result.stderr)")
        #expect(result.stderr.hasSuffix(": give a writable path\n") && result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
    }

    /// The most transfer steps that ran at once, from the event stream (events come in the order they happen).
    static func mostTransfersAtOnce(_ events: [[String: Any]]) -> Int {
        var inside = Set<String>()
        var most = 0
        for event in events {
            guard let device = event["device"] as? String else { continue }
            switch event["event"] as? String {
            case "step": if event["step"] as? String == "transfer" { inside.insert(device) } else { inside.remove(device) }
            case "finished": inside.remove(device)
            default: break
            }
            most = max(most, inside.count)
        }
        return most
    }

    /// Every protocol's host half waits for the adapter's transfer place before it transfers: with
    /// three connections and one transfer place, three devices are connected together but transfer
    /// one after another, and each ends with the image.
    @Test(arguments: [
        ("native", "samples/firmware/app-v2.bin"),
        ("smp", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin"),
        ("nordic-dfu", "Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip"),
        ("nordic-legacy", "Tests/BleotaProtocolsTests/Fixtures/nordic/adafruit-nrfutil-0.5.3.post16-app.zip"),
        ("espressif-ota", "samples/espressif/esp-app-sample.bin"),
        ("suota", "samples/suota/da1469x-app-sample-v3.img"),
        ("ti-oad", "samples/ti-oad/cc26x2-app-sample_oad.bin"),
        ("silabs-ota", "samples/silabs/efr32-app-sample.gbl"),
    ])
    func everyProtocolTransfersOnlyInItsTurn(_ setup: (protocolName: String, image: String)) throws {
        let list = try temporaryFile("devices.txt", (1...3).map { "sim://2m-dle?seed=\($0)&protocol=\(setup.protocolName)" }.joined(separator: "\n"))
        let result = try BleotaProcess.run(["fleet", "flash", setup.image, "--devices", list.path, "--connections", "3", "--transfers", "1", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let events = result.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(Set(events.filter { $0["event"] as? String == "started" }.compactMap { $0["device"] as? String }).count == 3)
        #expect(events.filter { $0["event"] as? String == "queued" }.count == 2, "two devices waited for the one place")
        #expect(Self.mostTransfersAtOnce(events) == 1)
        #expect(!result.stdout.contains("without waiting for a transfer place"))
        #expect(events.filter { ($0["result"] as? [String: Any])?["outcome"] as? String == "updated" }.count == 3, "\(result.stdout)")
    }

    /// The control: with as many transfer places as connections, the same devices transfer together.
    @Test func withoutALimitTheTransfersOverlap() throws {
        let list = try temporaryFile("devices.txt", (1...3).map { "sim://2m-dle?seed=\($0)" }.joined(separator: "\n"))
        let result = try BleotaProcess.run([
            "fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path,
            "--connections", "3", "--transfers", "3", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let events = result.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(Self.mostTransfersAtOnce(events) == 3)
        #expect(!events.contains { $0["event"] as? String == "queued" })
    }

    /// Five devices on two adapters with one transfer place each, drawn alternately: sim0 gets the
    /// two slower devices (1M PHY) and a third, so sim1 is done while sim0 still has one queued,
    /// which moves there — unless --keep-adapters.
    @Test(arguments: [false, true])
    func aQueuedDeviceMovesToAnAdapterThatRanDryUnlessKept(_ keep: Bool) throws {
        let list = try temporaryFile("devices.txt", (1...5).map { "sim://\($0 == 1 || $0 == 3 ? "1m-dle-7.5ms" : "2m-dle")?seed=\($0)" }.joined(separator: "\n"))
        let result = try BleotaProcess.run(
            [
                "fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--adapter", "sim0",
                "--adapter", "sim1", "--connections", "3", "--transfers", "1", "--json",
            ] + (keep ? ["--keep-adapters"] : []))
        #expect(result.status == 0, "\(result.stderr)")
        let events = result.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let moves = events.filter { ($0["text"] as? String)?.hasPrefix("moves from") == true }
        #expect(moves.count == (keep ? 0 : 1), "\(moves)")
        let lastStart = events.last { $0["event"] as? String == "started" && $0["device"] as? String == "sim://2m-dle?seed=5" }
        #expect(lastStart?["adapter"] as? String == (keep ? "sim0" : "sim1"), "the fifth device is updated through the adapter that ran dry")
        #expect(events.filter { ($0["result"] as? [String: Any])?["outcome"] as? String == "updated" }.count == 5, "\(result.stdout)")
    }

    @Test(arguments: [
        (["--scan-name", "x", "--devices", "d.txt"], "--devices and a scan filter exclude each other: give one"),
        ([String](), "no devices: give --devices FILE, or --scan-name/--scan-service to find them"),
        (["--devices", "d.txt", "--min-rssi=-70"], "--min-rssi filters a scan: add --scan-name or --scan-service"),
        (["--devices", "d.txt", "--min-rssi", "-70"], "--min-rssi filters a scan: add --scan-name or --scan-service"),
        (["--devices", "d.txt", "--backoff", "-1"], "--backoff -1"),
        (["--scan-service", "nope"], "--scan-service 'nope' is not a UUID: write 16 bits (FEF5) or 128 bits"),
        (["--devices", "d.txt", "--connections", "0"], "--connections 0 is out of range: use 1…16"),
        (["--devices", "d.txt", "--transfers", "17"], "--transfers 17 is out of range: use 1…16"),
        (["--devices", "d.txt", "--report", "r.txt"], "--report r.txt: name a .csv or .json file"),
        (["--devices", "d.txt", "--scan-older-than", "2.0.0"], "--scan-older-than filters a scan: add --scan-name or --scan-service"),
        (["--scan-name", "x", "--scan-older-than", "latest"], "--scan-older-than 'latest' is not a version: write e.g. 2.1.0"),
    ])
    func optionMistakesAreUsageErrors(_ setup: ([String], String)) throws {
        let result = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin"] + setup.0)
        #expect(result.status == 2)
        #expect(result.stderr.contains(setup.1), "\(result.stderr)")
    }
}
