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
    /// the first campaign's worker flashes whole images and keeps one, the second's patches. Each
    /// campaign is for one version (`--from-version`): a third device, running another, is left
    /// alone by both, and the status says what went over the air against whole images.
    @Test func aWorkerPatchesDevicesThatRunAnImageItsHostFlashed() throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-campaign-delta-\(UUID())")
        defer { try? FileManager.default.removeItem(at: home) }
        let (list, stop) = try NativeUDPCLITests.twoServedDevices(listedIn: home)
        defer { stop() }
        let (other, otherPort) = try NativeUDPCLITests.serve(["--firmware-version", "0.9.0"])
        defer {
            other.terminate()
            other.waitUntilExit()
        }
        let otherAddress = "udp://127.0.0.1:\(otherPort)"
        try (String(contentsOf: list, encoding: .utf8) + otherAddress + "\n").write(to: list, atomically: true, encoding: .utf8)
        let firmware = "samples/cortex-m/gcc-arm-none-eabi-12.2.1"
        func campaign(_ name: String, _ image: String, _ label: String, from version: String) throws -> (logs: [String], status: [String: Any]) {
            let create = try BleotaProcess.run([
                "fleet", "campaign", "create", image, "--devices", list.path, "--protocol", "native", "--version-label", label,
                "--from-version", version, "--campaign", server.url, "--name", name,
            ])
            #expect(create.status == 0, "\(create.stderr)")
            #expect(create.stdout.contains("updates only devices that run \(version); the others are left alone"), "\(create.stdout)")
            let logs = home.appendingPathComponent("logs-\(name)")
            let worker = try BleotaProcess.run(
                ["fleet", "worker", "--campaign", server.url, "--name", name, "--adapter", "a0", "--poll", "0.2", "--log-dir", logs.path],
                dataHome: home.appendingPathComponent("data"))
            #expect(worker.status == 0, "\(worker.stderr)")
            #expect(worker.stderr.contains("1 of another version left alone"), "\(worker.stderr)")
            let status = try BleotaProcess.run(["fleet", "status", "--campaign", server.url, "--name", name, "--json"])
            return (try NativeUDPCLITests.logs(in: logs), try #require(Self.json(status.stdout)))
        }
        func states(_ status: [String: Any]) -> [String: [String: Any]] {
            Dictionary(uniqueKeysWithValues: ((status["devices"] as? [[String: Any]]) ?? []).map { ($0["device"] as? String ?? "?", $0) })
        }
        let whole = try campaign("release-1", "\(firmware)/sensor-hub-2.0.0.bin", "2.0.0", from: "1.0.0")
        #expect(whole.logs.count == 3 && whole.logs.allSatisfy { !$0.contains("sending a delta patch") }, "\(whole.logs)")
        let first = states(whole.status)
        #expect(first[otherAddress]?["state"] as? String == "other-version" && first[otherAddress]?["versionBefore"] as? String == "0.9.0", "\(first)")
        // Whole images, compressed where the device takes it: never more than the image.
        let wholeAir = first.values.filter { $0["state"] as? String == "updated" }.map { ($0["airBytes"] as? Int ?? .max, $0["bytes"] as? Int ?? 0) }
        #expect(wholeAir.count == 2 && wholeAir.allSatisfy { $0.0 <= $0.1 && $0.0 > $0.1 / 2 }, "\(wholeAir)")

        let patched = try campaign("release-2", "\(firmware)/delta/sensor-hub-2.0.1.bin", "2.0.1", from: "2.0.0")
        #expect(patched.logs.count { $0.contains("sending a delta patch") } == 2, "\(patched.logs)")
        let second = states(patched.status)
        #expect(second[otherAddress]?["state"] as? String == "other-version" && second[otherAddress]?["bytes"] as? Int == 0, "\(second)")
        let updated = second.values.filter { $0["state"] as? String == "updated" }
        #expect(updated.count == 2)
        #expect(updated.allSatisfy { ($0["airBytes"] as? Int ?? .max) < ($0["bytes"] as? Int ?? 0) / 4 }, "a patch is a fraction of the image: \(updated)")
        let text = try BleotaProcess.run(["fleet", "status", "--campaign", server.url, "--name", "release-2"])
        #expect(text.stdout.contains("3 devices: 2 updated, 1 another version's (left alone)"), "\(text.stdout)")
        #expect(text.stdout.contains("of whole images") && text.stdout.contains("2 of 2 updates went as delta patches or compressed"), "\(text.stdout)")
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
        // A rollout that cannot be carried out is refused before the database is opened.
        let four = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-campaign-\(UUID()).txt")
        try (1...4).map { "udp://127.0.0.1:\($0)" }.joined(separator: "\n").write(to: four, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: four) }
        for (arguments, says) in [
            (["--stage", "0%"], "error: --stage '0%': '0%' is not a share above 0 % and at most 100 %: write it as 5% or 100%"),
            (["--stage", "canary=1", "--stage", "50%"], "error: the last --stage (50%) reaches 2 of the 4 devices: end with --stage 100% so that every device is offered"),
            (["--stage", "a=1", "--stage", "100%", "--stage-wait", "soon"], "error: --stage-wait 'soon' is neither a time nor 'manual': write 30m, 2h or manual"),
            (["--stage-wait", "1h"], "error: --stage-wait needs two or more --stage: there is no stage after the first to wait for"),
            (["--halt-on", "late"], "error: --halt-after and --halt-on qualify --halt-when-failed: give it too (--halt-when-failed 5%)"),
            (["--halt-when-failed", "150%"], "error: --halt-when-failed '150%' is not a share above 0 and at most 100 %: write it as 5%"),
            (["--rate", "20"], "error: --rate '20' is not a number of devices per minute or hour: write it as 20/min or 100/h"),
            (["--window", "2-5"], "error: --window '2-5' is not HH:MM-HH:MM: write it as 02:00-05:00 (22:00-02:00 runs past midnight)"),
            (["--window", "02:00-05:00", "--time-zone", "Mars/Olympus"], "error: --time-zone 'Mars/Olympus' is not a time zone: give an IANA name, as Europe/Berlin or UTC"),
            (["--time-zone", "UTC"], "error: --time-zone says how --window is read: give --window too (--window 02:00-05:00)"),
        ] {
            let refused = try BleotaProcess.run(
                ["fleet", "campaign", "create", Self.image, "--devices", four.path, "--campaign", "postgresql:///x?host=/nonexistent"] + arguments)
            #expect(refused.status == 2, "\(arguments): \(refused.stderr)")
            #expect(refused.stderr.hasPrefix(says + "\n"), "\(arguments): \(refused.stderr)")
        }
    }

    /// An operator's commands on a staged campaign, as processes against a real server: the stages
    /// drawn from the seed, advance, resume and abort, each refusal one line with exit 1.
    @Test func anOperatorAdvancesResumesAndAbortsAStagedCampaign() throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let list = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-campaign-\(UUID()).txt")
        try (1...8).map { "udp://127.0.0.1:\(30_000 + $0)" }.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: list) }
        let create = try BleotaProcess.run([
            "fleet", "campaign", "create", Self.image, "--devices", list.path, "--campaign", server.url, "--name", "staged",
            "--stage", "canary=1", "--stage", "50%", "--stage", "100%", "--stage-wait", "manual", "--seed", "9",
            "--halt-when-failed", "10%", "--halt-after", "4", "--rate", "100/h", "--window", "22:00-02:00", "--time-zone", "Europe/Berlin",
        ])
        #expect(create.status == 0, "\(create.stderr)")
        #expect(create.stdout.contains("stages: canary 1 → 50% 3 → 100% 4 devices, chosen with seed 9\n"), "\(create.stdout)")
        #expect(create.stdout.contains("halts when 10% of the finished devices failed (any), once 4 have finished\n"), "\(create.stdout)")
        #expect(create.stdout.contains("claims at most 100/h, by every worker together\nclaims only between 22:00-02:00 Europe/Berlin\n"), "\(create.stdout)")
        let advance = try BleotaProcess.run(["fleet", "campaign", "advance", "--campaign", server.url])
        #expect(advance.status == 0 && advance.stdout == "campaign 'staged': stage 2 of 3 (50%) is open\n", "\(advance.stdout)\(advance.stderr)")
        let stale = try BleotaProcess.run(["fleet", "campaign", "advance", "--campaign", server.url, "--from-stage", "1"])
        #expect(stale.status == 1)
        #expect(stale.stderr == "error: campaign 'staged' is at stage 2 of 3 now, not 1: another operator or its stage wait opened it; nothing changed\n")
        let status = try BleotaProcess.run(["fleet", "status", "--campaign", server.url, "--json"])
        let document = try #require(Self.json(status.stdout), "\(status.stdout)")
        let stages = try #require(document["stages"] as? [[String: Any]])
        #expect(stages.map { $0["devices"] as? Int } == [1, 3, 4] && stages.map { $0["open"] as? Bool } == [true, true, false])
        let devices = try #require(document["devices"] as? [[String: Any]])
        #expect(devices.compactMap { $0["stage"] as? Int }.count == 8)
        let text = try BleotaProcess.run(["fleet", "status", "--campaign", server.url])
        #expect(text.stdout.contains("stage 3 100%: 4 devices, 0 finished, 0 failed, not open\n"), "\(text.stdout)")
        #expect(
            text.stdout.hasSuffix(
                "stage 2 of 3 (50%): 0 of 3 finished, 0 failed; then 100%, by bleota fleet campaign advance; at most 100/h, claims only between 22:00-02:00 Europe/Berlin\n"),
            "\(text.stdout)")
        let resume = try BleotaProcess.run(["fleet", "campaign", "resume", "--campaign", server.url])
        #expect(resume.status == 1 && resume.stderr == "error: campaign 'staged' is not halted: nothing to resume\n", "\(resume.stderr)")
        let abort = try BleotaProcess.run(["fleet", "campaign", "abort", "--campaign", server.url, "--json"])
        #expect(abort.status == 0)
        #expect((Self.json(abort.stdout)?["progress"] as? [String: Any])?["abortedAt"] != nil, "\(abort.stdout)")
        let again = try BleotaProcess.run(["fleet", "campaign", "abort", "--campaign", server.url])
        #expect(again.status == 1 && again.stderr == "error: campaign 'staged' was aborted already\n")
        let aborted = try BleotaProcess.run(["fleet", "status", "--campaign", server.url])
        #expect(aborted.stdout.contains("aborted at "), "\(aborted.stdout)")
        // A watch of a campaign that can no longer move draws it once and ends.
        let watched = try BleotaProcess.run(["fleet", "status", "--campaign", server.url, "--watch", "--json", "--interval", "500ms"])
        #expect(watched.status == 0, "\(watched.stderr)")
        let documents = watched.stdout.split(separator: "\n")
        #expect(documents.count == 1 && Self.json(String(documents[0]))?["stages"] != nil, "\(watched.stdout)")
        let drawn = try BleotaProcess.run(["fleet", "status", "--campaign", server.url, "--watch"])
        #expect(drawn.status == 0 && drawn.stdout.contains("\naborted at "), "\(drawn.stdout)")
        #expect(drawn.stdout.contains("\nrate: measuring\n"), "\(drawn.stdout)")
        let both = try BleotaProcess.run(["fleet", "status", "--campaign", server.url, "--watch", "--tries"])
        #expect(both.status == 2 && both.stderr.contains("--tries lists every try once"), "\(both.stderr)")
    }
}
#endif
