import BleotaCodec
import Foundation
import Testing

/// bleota's own protocol over UDP, named with --protocol: `flash` against `bleota sim serve`.
@Suite struct NativeUDPCLITests {
    /// A UDP port free a moment ago (the kernel's pick for port 0).
    static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
        try #require(bound == 0)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// A served device that keeps its image from one flash to the next, and its UDP port.
    static func serve(_ arguments: [String] = []) throws -> (Process, Int) {
        let served = try ServedDevice.start(["--protocol", "native", "--udp", "127.0.0.1:\(try Self.freePort())", "--duration", "60"] + arguments)
        return (served.process, try served.port())
    }

    /// Two served devices and a device list naming both, written in `directory` (created); `stop` ends them.
    static func twoServedDevices(listedIn directory: URL) throws -> (list: URL, stop: () -> Void) {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let (first, firstPort) = try serve()
        let (second, secondPort) = try serve()
        let stop = {
            for server in [first, second] {
                server.terminate()
                server.waitUntilExit()
            }
        }
        let list = directory.appendingPathComponent("devices.txt")
        do {
            try "udp://127.0.0.1:\(firstPort)\nudp://127.0.0.1:\(secondPort)\n".write(to: list, atomically: true, encoding: .utf8)
        } catch {
            stop()
            throw error
        }
        return (list, stop)
    }

    /// `sim serve --power-loss`: the devices the seed picks go dark for good mid-update, the ledger
    /// says which and when, and a fleet fails each of them alone while the others are updated once.
    @Test func powerLossDevicesGoDarkForGoodAndTheLedgerSaysWhich() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-power-loss-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let ledger = directory.appendingPathComponent("ledger.jsonl").path
        let list = directory.appendingPathComponent("devices.txt")
        let server = Process()
        server.executableURL = BleotaProcess.executable
        server.currentDirectoryURL = BleotaProcess.repositoryRoot
        server.arguments = [
            "sim", "serve", "--protocol", "native", "--devices", "4", "--udp", "127.0.0.1:0", "--power-loss", "25%", "--power-loss-at", "12000",
            "--power-loss-seed", "9", "--ledger", ledger, "--duration", "60",
        ]
        _ = FileManager.default.createFile(atPath: list.path, contents: nil)
        server.standardOutput = try FileHandle(forWritingTo: list)
        let errors = Pipe()
        server.standardError = errors
        try server.run()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        var said = ""
        while !said.contains("serving 4") {
            let chunk = errors.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            said += String(decoding: chunk, as: UTF8.self)
        }
        let chosen = try #require(said.split(separator: "\n").first { $0.hasPrefix("--power-loss: 1 device") }, "\(said)")
        #expect(chosen.contains("12000 bytes into an update (seed 9)"), "\(chosen)")
        let dark = try #require(chosen.split(separator: " ").last.map(String.init))
        let run = try BleotaProcess.run([
            "fleet", "flash", "samples/firmware/app-v2.bin", "--version-label", "2.0.0", "--protocol", "native", "--devices", list.path,
            "--attempts", "1", "--connect-timeout", "0.5", "--report", directory.appendingPathComponent("report.json").path, "--quiet",
        ])
        #expect(run.status == 10, "\(run.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: directory.appendingPathComponent("report.json"))) as? [String: Any])
        let devices = try #require(report["devices"] as? [[String: Any]])
        #expect(devices.filter { $0["outcome"] as? String == "failed" }.map { $0["device"] as? String } == [dark], "\(devices)")
        let events = try String(contentsOfFile: ledger, encoding: .utf8).split(separator: "\n").compactMap {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(events.filter { $0["event"] as? String == "power-loss" }.map { $0["address"] as? String } == [dark])
        // The others took the image exactly once; the dark one never came back to take it.
        let into = events.filter { $0["event"] as? String == "reset" && $0["after"] as? String == "2.0.0" }.compactMap { $0["address"] as? String }
        #expect(Set(into).count == 3 && !into.contains(dark), "\(events)")
        // A share that is no share is one line.
        let refused = try BleotaProcess.run(["sim", "serve", "--devices", "4", "--power-loss", "0%"])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("--power-loss '0%' is neither a share above 0 and at most 100 % nor a count of 1…4 devices: write it as 1% or 3"), "\(refused.stderr)")
    }

    /// The text of each file in `directory` (a fleet's --log-dir), in name order.
    static func logs(in directory: URL) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted().map {
            try String(contentsOf: directory.appendingPathComponent($0), encoding: .utf8)
        }
    }

    /// `flash --base`: the device runs the base, so a delta patch goes instead of the image, the
    /// device rebuilds and verifies the new image before activating it; a base the device does not run
    /// is refused at the first connection with --delta always, and sent whole with auto, saying why.
    @Test func flashSendsADeltaPatchWhenTheDeviceRunsTheBase() throws {
        let (server, port) = try Self.serve()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let firmware = "samples/cortex-m/gcc-arm-none-eabi-12.2.1"
        let device = ["--device", "udp://127.0.0.1:\(port)", "--protocol", "native"]
        let first = try BleotaProcess.run(["flash", "\(firmware)/sensor-hub-2.0.0.bin", "--version-label", "2.0.0", "--quiet"] + device)
        #expect(first.status == 0, "\(first.stderr)")
        let patched = try BleotaProcess.run(
            ["flash", "\(firmware)/delta/sensor-hub-2.0.1.bin", "--base", "\(firmware)/sensor-hub-2.0.0.bin", "--version-label", "2.0.1", "--json"] + device)
        #expect(patched.status == 0, "\(patched.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(patched.stdout.utf8)) as? [String: Any])
        #expect(report["delta"] as? Bool == true && report["versionAfter"] as? String == "2.0.1", "\(report)")
        let sent = try #require(report["streamBytes"] as? Int)
        #expect(sent * 20 < 146_736, "\(sent) bytes sent for a 146 736-byte image")
        // The device now runs 2.0.1, not the base: always refuses before anything is sent…
        let always = try BleotaProcess.run(
            ["flash", "\(firmware)/delta/sensor-hub-2.1.0.bin", "--base", "\(firmware)/sensor-hub-2.0.0.bin", "--delta", "always", "--version-label", "2.1.0"]
                + device)
        #expect(always.status == 4)
        #expect(always.stderr.contains("error: connect failed: the device runs sha256:") && always.stderr.contains("give --base the image it runs"), "\(always.stderr)")
        // …and auto sends the whole image, saying why.
        let auto = try BleotaProcess.run(
            ["flash", "\(firmware)/delta/sensor-hub-2.1.0.bin", "--base", "\(firmware)/sensor-hub-2.0.0.bin", "--version-label", "2.1.0", "-v"] + device)
        #expect(auto.status == 0, "\(auto.stderr)")
        #expect(auto.stderr.contains("sending the whole image: the device runs sha256:"), "\(auto.stderr)")
        #expect(auto.stdout.contains("device now runs '2.1.0'") && !auto.stdout.contains("delta patch"))
        // A protocol that sends whole images only says so.
        let smp = try BleotaProcess.run(
            ["flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle", "--base", "samples/firmware/blinky.bin"])
        #expect(smp.status == 2 && smp.stderr.contains("--base: SMP (MCUmgr) sends whole images only: drop --base"), "\(smp.stderr)")
    }

    /// Without --base, the base is the copy bleota kept when it flashed the image the device runs:
    /// the first flash sends the whole image and keeps it, the next sends a patch against it. With
    /// --no-image-store nothing is looked up or kept, and a damaged copy is never a base.
    @Test func flashFindsTheBaseAmongTheImagesItFlashedBefore() throws {
        let (server, port) = try Self.serve()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let store = home.appendingPathComponent("data/bleota/images")
        func flash(_ image: String, _ label: String, _ extra: [String] = []) throws -> (BleotaProcess, [String: Any]) {
            let run = try BleotaProcess.run(
                ["flash", image, "--device", "udp://127.0.0.1:\(port)", "--protocol", "native", "--version-label", label, "--json", "-v"] + extra,
                dataHome: home.appendingPathComponent("data"))
            #expect(run.status == 0, "\(run.stderr)")
            return (run, try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stdout)"))
        }
        let firmware = "samples/cortex-m/gcc-arm-none-eabi-12.2.1"
        let old = try Array(Data(contentsOf: BleotaProcess.repositoryRoot.appendingPathComponent("\(firmware)/sensor-hub-2.0.0.bin")))
        let oldName = SHA256Digest.hash(old).hexString + ".bin"

        let (first, firstReport) = try flash("\(firmware)/sensor-hub-2.0.0.bin", "2.0.0")
        #expect(firstReport["delta"] as? Bool != true, "\(first.stderr)")
        let kept = try FileManager.default.contentsOfDirectory(atPath: store.path)
        #expect(kept == [oldName], "the store holds the image flashed, by its hash: \(kept)")
        #expect(try Array(Data(contentsOf: store.appendingPathComponent(oldName))) == old)

        let (second, secondReport) = try flash("\(firmware)/delta/sensor-hub-2.0.1.bin", "2.0.1")
        #expect(secondReport["delta"] as? Bool == true && secondReport["versionAfter"] as? String == "2.0.1", "\(second.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.path).count == 2)

        // --no-image-store: the whole image, and nothing added.
        let (third, thirdReport) = try flash("\(firmware)/delta/sensor-hub-2.1.0.bin", "2.1.0", ["--no-image-store"])
        #expect(thirdReport["delta"] as? Bool != true, "\(third.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.path).count == 2)

        // The device runs 2.1.0, which the store lacks: the whole image (said at info level), then kept.
        let (fourth, fourthReport) = try flash("\(firmware)/sensor-hub-2.0.0.bin", "2.0.0")
        #expect(fourthReport["delta"] as? Bool != true)
        #expect(fourth.stderr.contains("sending the whole image: bleota holds no copy of the image the device runs"), "\(fourth.stderr)")

        // A copy edited on disk no longer matches its name: never a base, so the whole image goes.
        let copy = store.appendingPathComponent(oldName)
        var damaged = old
        damaged[100] ^= 0xFF
        try Data(damaged).write(to: copy)
        let (fifth, fifthReport) = try flash("\(firmware)/delta/sensor-hub-2.0.1.bin", "2.0.1")
        #expect(fifthReport["delta"] as? Bool != true && fifthReport["versionAfter"] as? String == "2.0.1", "\(fifth.stderr)")
    }

    /// A fleet sends each device a patch against the image it runs, when bleota flashed that image
    /// before: the first fleet sends whole images and keeps a copy, the second patches.
    @Test func aFleetPatchesEachDeviceAgainstTheImageItRuns() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-fleet-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let (list, stop) = try Self.twoServedDevices(listedIn: home)
        defer { stop() }
        let firmware = "samples/cortex-m/gcc-arm-none-eabi-12.2.1"
        func fleet(_ image: String, _ label: String) throws -> [String] {
            let logs = home.appendingPathComponent("logs-\(label)")
            let run = try BleotaProcess.run(
                ["fleet", "flash", image, "--devices", list.path, "--protocol", "native", "--version-label", label, "--log-dir", logs.path],
                dataHome: home.appendingPathComponent("data"))
            #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
            return try Self.logs(in: logs)
        }
        let whole = try fleet("\(firmware)/sensor-hub-2.0.0.bin", "2.0.0")
        #expect(whole.count == 2 && whole.allSatisfy { !$0.contains("sending a delta patch") }, "\(whole)")
        let patched = try fleet("\(firmware)/delta/sensor-hub-2.0.1.bin", "2.0.1")
        #expect(
            patched.count == 2 && patched.allSatisfy { $0.contains("sending a delta patch") && $0.contains("against the image bleota sent before (sha256:") },
            "\(patched)")
    }

    @Test func flashOverUDPToASimServeDevice() throws {
        let (server, port) = try Self.serve()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let flash = try BleotaProcess.run([
            "flash", "samples/firmware/blinky.bin", "--device", "udp://127.0.0.1:\(port)",
            "--protocol", "native", "--version-label", "2.0.0", "--quiet",
        ])
        #expect(flash.status == 0, "\(flash.stderr)")
        #expect(flash.stdout.contains("device now runs '2.0.0'"), "\(flash.stdout)")
        // Without --protocol, what answers on a UDP port is taken to be MCUmgr.
        let unnamed = try BleotaProcess.run(["echo", "x", "--device", "udp://127.0.0.1:\(port)"])
        #expect(unnamed.status != 0)
    }
}
