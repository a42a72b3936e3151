import BleotaCommands
import Foundation
import Testing

/// The real `bleota` binary given what a careless or hostile user might type:
/// every case ends with one line naming the problem and the fix, the
/// documented exit status, before anything touches a device, and nothing
/// left behind — not even when the process is killed by a signal.
@Suite struct HostileInputCLITests {
    static let image = "samples/firmware/blinky.bin"

    /// The first line of stderr, without the usage lines argument-parser adds.
    static func firstLine(_ result: BleotaProcess) -> String {
        String(result.stderr.split(separator: "\n", omittingEmptySubsequences: true).first ?? "")
    }

    /// `--delta always` where bleota holds no copy of the running image: a local cause, exit 3
    /// (a base that is missing, as a missing file is), not 4 "the device refused"; nothing sent
    /// (issue 48, item 17). Each run here has an image store of its own, empty.
    @Test func deltaAlwaysWithoutAStoredBaseIsALocalFailure() throws {
        let result = try BleotaProcess.run(
            ["flash", "samples/cortex-m/gcc-arm-none-eabi-12.2.1/delta/sensor-hub-2.0.1.bin", "--device", "sim://2m-dle", "--delta", "always", "--json"])
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stderr.contains("bleota holds no copy of the image the device runs"), "\(result.stderr)")
        #expect(result.stderr.contains("give --base the image it runs, or use --delta auto"))
        let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(report["exitStatus"] as? Int == 3)
        #expect(report["deviceState"] as? String == "old-image", "\(report)")
    }

    @Test(
        arguments: [
            (["flash", image, "--device", "sim://2m-dle", "--delay", "nan"], "error: --delay nan is out of range: use 0…60 s (or write a unit: ms, us)"),
            (["flash", image, "--device", "sim://2m-dle", "--delay=-inf"], "error: --delay -inf is out of range: use 0…60 s (or write a unit: ms, us)"),
            (["flash", image, "--device", "sim://2m-dle", "--ack-timeout", "inf"], "error: --ack-timeout inf is out of range: use 0.001…600 s (or write a unit: ms, us)"),
            (
                ["flash", image, "--device", "sim://2m-dle", "--connect-timeout", "1e300"],
                "error: --connect-timeout 1e300 is out of range: use 0.1…3600 s (or write a unit: ms, us)"
            ),
            (["flash", image, "--device", "sim://2m-dle?erase=1e300"], "error: sim:// key 'erase' is out of range: use 0…86400000 ms, got 1e300"),
            (["flash", image, "--device", "sim://2m-dle?erase=nan"], "error: sim:// key 'erase' needs a number, got 'nan'"),
            (["sim", "serve", "--swap-time", "nan"], "error: --swap-time nan is out of range: use 0…3600 s (or write a unit: ms, us)"),
            (["pull", "notes.txt", "--device", "sim://2m-dle", "-o", ""], "error: -o/--output is empty: give the file to write, e.g. -o hello.txt"),
            // A negative number is the option's value, not an option: its own check answers.
            (["flash", image, "--device", "sim://2m-dle", "--delay", "-1"], "error: --delay cannot be negative: use 0 or more, e.g. --delay 2ms"),
            (
                ["flash", image, "--device", "sim://2m-dle", "--connect-timeout", "90min"],
                "error: the value '90min' is invalid for '--connect-timeout <connect-timeout>': write seconds, or a number with its unit (500ms, 2s, 1500us)"
            ),
            (["flash", image, "--device", "sim://2m-dle", "--connect-timeout", "-.5"], "error: --connect-timeout -.5 is out of range: use 0.1…3600 s (or write a unit: ms, us)"),
            // --delta always where no patch can go: said before anything is sent.
            (
                ["flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle", "--delta", "always"],
                "error: --delta always: SMP (MCUmgr) sends whole images only: drop --delta"
            ),
            (
                ["flash", image, "--device", "sim://2m-dle", "--delta", "always", "--no-image-store"],
                "error: --delta always with --no-image-store needs --base FILE, the image the device runs"
            ),
            (
                ["flash", "samples/espressif/esp-app-sample.bin", "--device", "sim://2m-dle", "--delta", "always"],
                "error: --delta always: Espressif's BLE OTA does not report the image a device runs, so bleota cannot look it up: give --base the image it runs"
            ),
            // A plain image for an address whose protocol bleota only assumes: said before connecting.
            (
                ["flash", image, "--device", "udp://127.0.0.1:9"],
                "error: samples/firmware/blinky.bin is not an image that SMP (MCUmgr) takes, and that is what bleota assumes udp://127.0.0.1:9 speaks: name the device's protocol with --protocol (bleota protocols lists them)"
            ),
        ] as [([String], String)])
    func nonsenseNumbersAndEmptyPathsAreUsageErrors(arguments: [String], message: String) async throws {
        // In-process, the error exactly as the binary prints it (its first line; the second is the usage).
        let (status, output) = await Terminal.capturing { await BleotaCommand.run(arguments: arguments) }
        #expect(status == 2, "\(arguments): \(output.standardError.contents)")
        #expect(output.standardError.contents.split(separator: "\n").first.map(String.init) == message)
        #expect(output.standardOutput.contents.isEmpty)
    }

    /// argument-parser's own usage errors speak as bleota's do: `error: …` on one line, the usage
    /// and where to read more on a second, exit 2; with `--json`, one failure document on stdout
    /// with the keys every failure has.
    @Test func argumentParserErrorsAreOneLineAndAUsage() throws {
        let result = try BleotaProcess.run(["flash", Self.image, "--json"])
        #expect(result.status == 2)
        let lines = result.stderr.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(result.stderr)")
        #expect(lines.first == "error: missing expected argument '--device <device>'")
        #expect(lines.last?.hasPrefix("usage: bleota flash [<options>] --device <device>") == true, "\(lines)")
        #expect(lines.last?.hasSuffix("(see 'bleota flash --help')") == true, "\(lines)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(document["error"] as? String == "missing expected argument '--device <device>'")
        #expect(document["code"] as? String == "usage")
        #expect(document["exitStatus"] as? Int == 2)
        #expect(document.keys.contains("step") && document["step"] is NSNull)
        let nested = try BleotaProcess.run(["fleet", "flash", "--bogus"])
        #expect(nested.status == 2)
        #expect(nested.stderr.hasSuffix("(see 'bleota fleet flash --help')\n"), "\(nested.stderr)")
    }

    /// 70 000 characters cannot be echoed (the device's buffer is a few KiB):
    /// refused before connecting, naming the limit.
    @Test func anEchoLongerThanAnyDeviceBufferIsRefused() throws {
        let result = try BleotaProcess.run(["echo", String(repeating: "x", count: 70_000), "--device", "sim://2m-dle?protocol=smp"])
        #expect(result.status == 2)
        let line = Self.firstLine(result)
        #expect(line.contains("4096"), "\(line)")
        #expect(result.stderr.count < 400, "the message must not quote the whole text back")
    }

    /// `--key` promises a signature check; a plain image carries no signature,
    /// so flashing it with the native protocol is refused rather than the key
    /// silently ignored.
    @Test func aKeyWithAnUnsignedImageIsRefusedNotIgnored() throws {
        let result = try BleotaProcess.run([
            "flash", Self.image, "--device", "sim://2m-dle",
            "--key", "samples/keys/openssl-3.0.19-ec-p256-public.pem",
        ])
        #expect(result.status == 2)
        #expect(result.stderr.hasPrefix("error: --key: samples/firmware/blinky.bin carries no signature"))
        #expect(result.stderr.contains("drop --key"))
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    /// An output nobody could write is refused before the device is touched
    /// (no transfer, no tuning run wasted on a typo).
    @Test func unwritableOutputsAreRefusedBeforeConnecting() throws {
        let missing = "/nonexistent-\(UUID().uuidString)"
        let plot = try BleotaProcess.run(["tune", "--device", "sim://2m-dle", "--plot", "\(missing)/x.svg", "--no-saved-tuning"])
        #expect(plot.status == 3)
        #expect(plot.stdout.isEmpty, "tuning ran before the plot path was checked: \(plot.stdout)")
        #expect(Self.firstLine(plot) == "error: \(missing)/x.svg: the directory \(missing) does not exist: create it first")
        let pull = try BleotaProcess.run(["pull", "notes.txt", "--device", "sim://2m-dle", "-o", "\(missing)/notes.txt", "--json"])
        #expect(pull.status == 3)
        #expect(pull.stderr.contains("the directory \(missing) does not exist"))
        let directory = try BleotaProcess.run(["pull", "notes.txt", "--device", "sim://2m-dle", "-o", "/tmp"])
        #expect(directory.status == 3)
        #expect(Self.firstLine(directory) == "error: /tmp is a directory: give a file name inside it")
    }

    /// Starts `bleota` with `arguments` (with `ignoring` ignored from the
    /// start, as nohup or a shell's background job starts it), waits until
    /// `ready` holds, sends `signal`, and returns how the process ended.
    static func interrupt(
        _ arguments: [String], signal: Int32, ignoring: Int32? = nil,
        when ready: () -> Bool
    ) throws -> (reason: Process.TerminationReason, status: Int32) {
        let process = Process()
        if let ignoring {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "trap '' \(ignoring); exec \"$0\" \"$@\"", BleotaProcess.executable.path] + arguments
        } else {
            process.executableURL = BleotaProcess.executable
            process.arguments = arguments
        }
        process.currentDirectoryURL = BleotaProcess.repositoryRoot
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Real time: a real bleota process is what is waited for (a liveness bound of 60 s).
        let deadline = Date().addingTimeInterval(60)
        while !ready(), process.isRunning, Date() < deadline { usleep(2_000) }
        #expect(process.isRunning, "\(arguments) ended before it could be interrupted")
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        return (process.terminationReason, process.terminationStatus)
    }

    /// `sim serve --serial-link` makes a symbolic link to its pseudo-terminal;
    /// SIGTERM (a service manager stopping it) must remove it, and the exit is
    /// 130, as for every interrupted command (docs/commands.md).
    @Test func theSerialLinkIsRemovedWhenTheSimulatorIsTerminated() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-link-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let link = directory.appendingPathComponent("ttyBLEOTA").path
        let ended = try Self.interrupt(["sim", "serve", "--protocol", "smp", "--serial", "--serial-link", link], signal: SIGTERM) {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: link)) != nil
        }
        #expect(ended.reason == .exit && ended.status == 130, "\(ended)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == nil, "the link outlived the process")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    /// Ctrl-C in the middle of writing a large conversion leaves neither the
    /// temporary file nor a half-written output.
    @Test func anInterruptedConversionLeavesNothingBehind() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-convert-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("big.bin").path
        #expect(truncate(input, 0) == -1)  // not there yet
        #expect(FileManager.default.createFile(atPath: input, contents: nil))
        #expect(truncate(input, 48 << 20) == 0)  // 48 MiB of zeros: about 135 MB of HEX text to write
        let output = directory.appendingPathComponent("out.hex").path
        let ended = try Self.interrupt(["image", "convert", input, output], signal: SIGINT) {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).contains { $0.hasSuffix(".tmp") }
        }
        #expect(ended.reason == .uncaughtSignal && ended.status == SIGINT)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["big.bin"])
    }

    /// A process started with SIGINT ignored (nohup, a background job) keeps
    /// it ignored: the conversion finishes and its output is complete.
    @Test func aSignalIgnoredAtStartStaysIgnored() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-nohup-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("big.bin").path
        #expect(FileManager.default.createFile(atPath: input, contents: nil))
        #expect(truncate(input, 8 << 20) == 0)
        let output = directory.appendingPathComponent("out.hex").path
        let ended = try Self.interrupt(["image", "convert", input, output], signal: SIGINT, ignoring: SIGINT) {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).contains { $0.hasSuffix(".tmp") }
        }
        #expect(ended.reason == .exit && ended.status == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["big.bin", "out.hex"])
    }
}
