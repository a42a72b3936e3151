// Built with the Campaigns trait only (Package.swift): it needs PostgreSQL's client.
#if Campaigns
import BleotaTestSupport
import Foundation
import Testing

/// A campaign as it runs across hosts, in one machine: a real PostgreSQL server,
/// simulated MCUboot devices served over UDP by `bleota sim serve --devices`
/// (each with its own flash, reset ledger and BLE link model), and three
/// `bleota fleet worker` processes, one of them killed (SIGKILL) mid-update.
@Suite(.serialized) struct CampaignCLITests {
    static let image = "samples/cortex-m/gcc-arm-none-eabi-12.2.1/sensor-hub-2.0.0-mcuboot-ecdsa-p256.bin"

    static func json(_ text: String) -> [String: Any]? {
        try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
    }

    static func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test func workersShareACampaignAndAKilledWorkersDevicesAreFinishedByTheOthers() throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-campaign-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bleota = BleotaProcess.executable.path
        let root = BleotaProcess.repositoryRoot.path

        // Twelve devices, each a simulated MCUboot device with its own link model.
        let ledger = "\(directory)/ledger.jsonl", served = "\(directory)/served.txt"
        let devices = try SpawnedProcess(
            [
                bleota, "sim", "serve", "--devices", "12", "--udp", "127.0.0.1:0", "--swap-time", "200ms",
                "--link", "2m-dle", "--ledger", ledger, "--duration", "300",
            ],
            output: served, errors: "\(directory)/served.err")
        defer {
            devices.signal(SIGTERM)
            _ = devices.wait(timeout: 10)
        }
        var addresses: [String] = []
        for _ in 0..<250 where addresses.count < 12 {
            addresses = Self.lines(served).filter { $0.hasPrefix("udp://") }
            // Real time: real sim serve processes are what is waited for.
            usleep(20_000)
        }
        try #require(addresses.count == 12, "sim serve printed \(Self.lines(served))")
        try addresses.joined(separator: "\n").write(toFile: "\(directory)/devices.txt", atomically: true, encoding: .utf8)

        let create = try BleotaProcess.run([
            "fleet", "campaign", "create", "\(root)/\(Self.image)", "--devices", "\(directory)/devices.txt",
            "--campaign", server.url, "--name", "line-3", "--lease", "5", "--backoff", "1", "--json",
        ])
        #expect(create.status == 0, "\(create.stderr)")
        #expect(Self.json(create.stdout)?["imageSize"] as? Int == 147_399, "\(create.stdout)")

        // Three workers, each with two connections on one adapter.
        var workers: [SpawnedProcess] = []
        for number in 1...3 {
            workers.append(
                try SpawnedProcess(
                    [
                        bleota, "fleet", "worker", "--campaign", server.url, "--adapter", "a0", "--connections", "2",
                        "--poll", "0.3", "--worker-name", "w\(number)", "--json",
                    ],
                    output: "\(directory)/w\(number).json", errors: "\(directory)/w\(number).err"))
        }
        // Kill w1 while one of its devices is in the middle of its transfer.
        var killedDuring: String?
        for _ in 0..<1500 where killedDuring == nil {
            if let line = Self.lines("\(directory)/w1.json").last(where: { $0.contains("\"event\":\"progress\"") }),
                let event = Self.json(line), let acknowledged = event["acknowledged"] as? Int, acknowledged > 20_000
            {
                workers[0].signal(SIGKILL)
                killedDuring = event["device"] as? String
            }
            // Real time: real worker processes are what is watched.
            usleep(20_000)
        }
        try #require(killedDuring != nil, "w1 never reached a transfer: \(Self.lines("\(directory)/w1.err"))")
        #expect(workers[0].wait(timeout: 10) == 128 + SIGKILL)
        // SIGKILL leaves the killed worker's copy of the image; the next worker on this host removes it.
        let spool = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-worker-\(workers[0].pid)").path
        defer { try? FileManager.default.removeItem(atPath: spool) }
        for (index, worker) in workers.enumerated().dropFirst() {
            let status = worker.wait(timeout: 180)
            #expect(status == 0, "w\(index + 1) exited \(String(describing: status)): \(Self.lines("\(directory)/w\(index + 1).err").suffix(5))")
            if status == nil { worker.signal(SIGKILL) }
        }

        // The campaign: every device runs the image; the killed worker's tries ran out and others finished them.
        let status = try BleotaProcess.run(["fleet", "status", "--campaign", server.url, "--tries", "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let document = try #require(Self.json(status.stdout))
        let states = try #require(document["devices"] as? [[String: Any]])
        let tries = try #require(document["tries"] as? [[String: Any]])
        #expect(states.count == 12)
        #expect(states.allSatisfy { ["updated", "skipped"].contains($0["state"] as? String) }, "\(states.map { ($0["device"]!, $0["state"]!, $0["error"] ?? "") })")
        let lost = tries.filter { $0["outcome"] as? String == "lease-expired" }
        #expect(!lost.isEmpty && lost.allSatisfy { $0["worker"] as? String == "w1" }, "\(tries)")
        #expect(lost.contains { $0["device"] as? String == killedDuring }, "the device w1 was updating when killed lost its lease")
        for record in lost {
            let device = record["device"] as? String
            let next = tries.first { $0["device"] as? String == device && $0["tryNumber"] as? Int == (record["tryNumber"] as? Int ?? 0) + 1 }
            #expect(["w2", "w3"].contains(next?["worker"] as? String), "\(device ?? "?") was finished by another worker")
        }
        // No two tries of one device overlapped: each began after the one before it ended.
        for address in addresses {
            let mine = tries.filter { $0["device"] as? String == address }
            #expect(mine.filter { ["updated", "skipped"].contains($0["outcome"] as? String) }.count == 1, "\(address): \(mine)")
            for (earlier, later) in zip(mine, mine.dropFirst()) {
                #expect((earlier["endedAt"] as? String ?? "~") <= (later["startedAt"] as? String ?? ""), "\(address): \(earlier) overlaps \(later)")
            }
        }
        // The devices' own account: each reset exactly once, from 1.0.0 into 2.0.0.
        let resets = Self.lines(ledger).compactMap(Self.json)
        for address in addresses {
            let mine = resets.filter { $0["address"] as? String == address }
            #expect(
                mine.count == 1 && mine.first?["before"] as? String == "1.0.0" && mine.first?["after"] as? String == "2.0.0",
                "\(address) was updated \(mine.count) times: \(mine)")
        }
        // The workers' own account adds up: every device recorded once by w2 or w3 (or by w1 before it died).
        #expect(
            !FileManager.default.fileExists(atPath: FileManager.default.temporaryDirectory.appendingPathComponent("bleota-worker-\(workers[1].pid)").path),
            "a worker that ended removed its copy of the image")
        let summaries = (2...3).compactMap { number in Self.lines("\(directory)/w\(number).json").last.flatMap(Self.json)?["worker"] as? [String: Any] }
        #expect(summaries.count == 2)
    }

    /// A worker sends each device a patch against the image it runs when the host kept that image:
    /// the first campaign's worker flashes whole images and keeps one, the second's patches.
    @Test func aWorkerPatchesDevicesThatRunAnImageItsHostFlashed() throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-campaign-delta-\(UUID())")
        defer { try? FileManager.default.removeItem(at: home) }
        let (list, stop) = try NativeUDPCLITests.twoServedDevices(listedIn: home)
        defer { stop() }
        let firmware = "samples/cortex-m/gcc-arm-none-eabi-12.2.1"
        func campaign(_ name: String, _ image: String, _ label: String) throws -> [String] {
            let create = try BleotaProcess.run([
                "fleet", "campaign", "create", image, "--devices", list.path, "--protocol", "native", "--version-label", label,
                "--campaign", server.url, "--name", name,
            ])
            #expect(create.status == 0, "\(create.stderr)")
            let logs = home.appendingPathComponent("logs-\(name)")
            let worker = try BleotaProcess.run(
                ["fleet", "worker", "--campaign", server.url, "--name", name, "--adapter", "a0", "--poll", "0.2", "--log-dir", logs.path],
                dataHome: home.appendingPathComponent("data"))
            #expect(worker.status == 0, "\(worker.stderr)")
            return try NativeUDPCLITests.logs(in: logs)
        }
        let whole = try campaign("release-1", "\(firmware)/sensor-hub-2.0.0.bin", "2.0.0")
        #expect(whole.count == 2 && whole.allSatisfy { !$0.contains("sending a delta patch") }, "\(whole)")
        let patched = try campaign("release-2", "\(firmware)/delta/sensor-hub-2.0.1.bin", "2.0.1")
        #expect(patched.count == 2 && patched.allSatisfy { $0.contains("sending a delta patch") }, "\(patched)")
    }

    @Test func mistakesAreOneLineWithTheirExitStatus() throws {
        let unreachable = try BleotaProcess.run(["fleet", "status", "--campaign", "postgresql://bleota@/postgres?host=/nonexistent-bleota&port=5"])
        #expect(unreachable.status == 12)
        #expect(
            unreachable.stderr
                == "error: connecting to postgresql://bleota@/nonexistent-bleota/.s.PGSQL.5/postgres: no server socket at /nonexistent-bleota/.s.PGSQL.5: is the server running, and are host= and port= its socket directory and port?\n"
        )
        let badURL = try BleotaProcess.run(["fleet", "worker", "--campaign", "mysql://db/x"])
        #expect(badURL.status == 2)
        #expect(badURL.stderr.hasPrefix("error: 'mysql://db/x' is not a postgresql:// URL"), "\(badURL.stderr)")
        let list = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-campaign-\(UUID()).txt")
        try "sim://2m-dle?seed=1\n".write(to: list, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: list) }
        let simulated = try BleotaProcess.run(["fleet", "campaign", "create", Self.image, "--devices", list.path, "--campaign", "postgresql:///x?host=/nonexistent"])
        #expect(simulated.status == 3)
        #expect(
            simulated.stderr.contains("is a sim:// device, which lives inside one process: serve simulated devices to every worker with bleota sim serve --devices N"),
            "\(simulated.stderr)")
        let shortLease = try BleotaProcess.run(["fleet", "campaign", "create", Self.image, "--devices", list.path, "--lease", "1"])
        #expect(shortLease.status == 2)
        #expect(shortLease.stderr.contains("--lease"), "\(shortLease.stderr)")
        // Without --protocol the keys are checked by each worker, but a pair must still be KEY=VALUE.
        let udpList = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-campaign-\(UUID()).txt")
        try "udp://127.0.0.1:1\n".write(to: udpList, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: udpList) }
        let badPair = try BleotaProcess.run([
            "fleet", "campaign", "create", Self.image, "--devices", udpList.path, "--protocol-option", "window",
            "--campaign", "postgresql:///x?host=/nonexistent",
        ])
        #expect(badPair.status == 2)
        #expect(badPair.stderr == "error: --protocol-option 'window' is not KEY=VALUE: write e.g. --protocol-option bootloader-name=DfuNew\n", "\(badPair.stderr)")
    }
}
#endif
