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
        let result = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path, "--adapter", "sim0", "--adapter", "sim1",
                                            "--version-label", "2.0.0", "--report", report.path, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        let events = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(events.count == lines.count, "every stdout line is one JSON object")
        #expect(events.filter { $0["event"] as? String == "finished" }.count == 6)
        #expect(Set(events.compactMap { $0["adapter"] as? String }) == ["sim0", "sim1"], "devices were spread over both adapters")
        let summary = try #require(events.last?["summary"] as? [String: Any])
        #expect(summary["updated"] as? Int == 6 && summary["failed"] as? Int == 0)
        let csv = try String(contentsOf: report, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(csv.first == "device,label,adapter,outcome,version_before,version_after,seconds,bytes,resends,attempts,error_step,error,device_state")
        #expect(csv.count == 7)
        #expect(csv.dropFirst().allSatisfy { $0.contains(",updated,1.0.0,2.0.0,") }, "\(csv)")
    }

    @Test func someFailedIsExitTenWithTheStepInTheReport() throws {
        let list = try temporaryFile("devices.csv", """
            device,label
            sim://2m-dle?seed=1,good
            sim://2m-dle?seed=2&slot=4096,too-small
            """)
        let report = list.deletingLastPathComponent().appendingPathComponent("report.json")
        let result = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path,
                                            "--report", report.path, "--quiet"])
        #expect(result.status == 10, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("error: 1 of 2 devices run the target (1 updated, 0 already did), 1 failed"), "\(result.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: report)) as? [String: Any])
        let devices = try #require(document["devices"] as? [[String: Any]])
        #expect(devices.map { $0["label"] as? String } == ["good", "too-small"])
        #expect(devices[0]["outcome"] as? String == "updated")
        #expect(devices[1]["outcome"] as? String == "failed" && devices[1]["errorStep"] as? String != nil, "\(devices[1])")
        #expect(devices[1]["attempts"] as? Int == 1, "a refusal is not tried again")
    }

    @Test func aBadListIsOneLineNamingTheLineExitThree() throws {
        let list = try temporaryFile("devices.txt", "sim://2m-dle?seed=1\nsim://2m-dle?seed=2 sim://2m-dle?seed=3\n")
        let result = try BleotaProcess.run(["fleet", "flash", "samples/firmware/app-v2.bin", "--devices", list.path])
        #expect(result.status == 3)
        #expect(result.stderr == "error: \(list.path):2: 'sim://2m-dle?seed=2 sim://2m-dle?seed=3' is not one address: write one a line, or a CSV with a header line naming a 'device' column\n")
    }

    @Test(arguments: [
        (["--scan-name", "x", "--devices", "d.txt"], "--devices and a scan filter exclude each other: give one"),
        ([String](), "no devices: give --devices FILE, or --scan-name/--scan-service to find them"),
        (["--devices", "d.txt", "--min-rssi=-70"], "--min-rssi filters a scan: add --scan-name or --scan-service"),
        (["--scan-service", "nope"], "--scan-service 'nope' is not a UUID: write 16 bits (FEF5) or 128 bits"),
        (["--devices", "d.txt", "--connections", "0"], "--connections 0 is out of range: use 1…16"),
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
