import Foundation
import Testing

@testable import BleotaCommands

/// Runs the real `bleota` binary (built by `swift build`) and captures its output.
struct BleotaProcess {
    var status: Int32
    var stdout: String
    var stderr: String

    static var executable: URL {
        // Tests/BleotaCommandsTests/CLITests.swift → repository root → .build/debug/bleota
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/bleota")
    }

    static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    static let configHome = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tests-\(UUID())")

    /// Runs bleota. Saved tunings go to `configHome`, a directory of this test run, never the user's
    /// own; the images `flash` keeps for delta patches go to `dataHome`, by default one of this run
    /// alone (removed after it), so that no test's flash is patched against another test's image.
    static func run(
        _ arguments: [String], currentDirectory: URL? = nil, configHome: URL = BleotaProcess.configHome, dataHome: URL? = nil,
        environment extra: [String: String] = [:]
    ) throws -> BleotaProcess {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.currentDirectoryURL = currentDirectory ?? repositoryRoot
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_CONFIG_HOME"] = configHome.path
        let ownData = configHome.appendingPathComponent("data-\(UUID().uuidString)")
        defer { if dataHome == nil { try? FileManager.default.removeItem(at: ownData) } }
        environment["XDG_DATA_HOME"] = (dataHome ?? ownData).path
        for (key, value) in extra { environment[key] = value }
        process.environment = environment
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return BleotaProcess(
            status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errData, as: UTF8.self))
    }
}

@Suite struct CLITests {
    @Test func versionPrintsTheVersion() throws {
        let result = try BleotaProcess.run(["--version"])
        #expect(result.status == 0)
        #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == BleotaCommand.version)
    }

    @Test func helpListsExitCodes() throws {
        let result = try BleotaProcess.run(["--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("USAGE: bleota"))
        #expect(result.stdout.contains("2 usage error"))
    }

    @Test func unknownOptionIsAUsageErrorWithExitCode2() throws {
        let result = try BleotaProcess.run(["--no-such-option"])
        #expect(result.status == 2)
        #expect(result.stderr.hasPrefix("error: unknown option '--no-such-option'\nusage: bleota "), "\(result.stderr)")
    }

    /// A value that looks like a negative number belongs to the option before it.
    /// A misspelt command or protocol gets the nearest name, as a misspelt option does, and a
    /// protocol that is a description in the repository gets the --protocol-file that loads it
    /// (issue 48, item 17).
    @Test func misspeltNamesGetTheNearestOne() throws {
        let command = try BleotaProcess.run(["flsh"])
        #expect(command.status == 2)
        #expect(command.stderr.hasPrefix("error: unexpected argument 'flsh' (did you mean 'flash'?)\n"), "\(command.stderr)")
        let group = try BleotaProcess.run(["image", "inf"])
        #expect(group.stderr.hasPrefix("error: unexpected argument 'inf' (did you mean 'info'?)\n"), "\(group.stderr)")
        let image = BleotaProcess.repositoryRoot.appendingPathComponent("samples/firmware/blinky.hex").path
        let misspelt = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle", "--protocol", "smpp"])
        #expect(misspelt.status == 2)
        #expect(misspelt.stderr.hasPrefix("error: --protocol 'smpp' is not a protocol bleota knows (did you mean 'smp'?): use one of native, smp,"))
        let described = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle", "--protocol", "telink-ota"])
        #expect(described.status == 2)
        #expect(described.stderr.contains("or load its description with --protocol-file protocols/telink-ota.yaml\n"), "\(described.stderr)")
        let far = try BleotaProcess.run(["flash", image, "--device", "sim://2m-dle", "--protocol", "xyz"])
        #expect(!far.stderr.contains("did you mean"))
        #expect(far.stderr.contains("or a protocol described in YAML with --protocol-file FILE"))
    }

    @Test func negativeNumbersAreOptionValues() {
        #expect(BleotaCommand.joiningNegativeValues(["flash", "--delay", "-1", "x"]) == ["flash", "--delay=-1", "x"])
        #expect(BleotaCommand.joiningNegativeValues(["--backoff", "-.5"]) == ["--backoff=-.5"])
        #expect(BleotaCommand.joiningNegativeValues(["--window", "-x"]) == ["--window", "-x"])
        #expect(BleotaCommand.joiningNegativeValues(["--", "--delay", "-1"]) == ["--", "--delay", "-1"])
    }

    /// Giving a default changes nothing: `--delay 0` and `--window N` are where closed-loop
    /// pacing starts, and only `--no-adaptive` keeps them fixed.
    @Test func aWindowOrDelayStartsTheClosedLoop() throws {
        let defaults = try TuningOptions.parse([]).tuning()
        let zero = try TuningOptions.parse(["--delay", "0"]).tuning()
        #expect(zero.adaptive && defaults.adaptive)
        #expect(zero.interPacketDelay == defaults.interPacketDelay && zero.window == defaults.window)
        let window = try TuningOptions.parse(["--window", "8"]).tuning()
        #expect(window.adaptive && window.window == 8)
        let fixed = try TuningOptions.parse(["--window", "8", "--no-adaptive"]).tuning()
        #expect(!fixed.adaptive && fixed.window == 8)
    }

    /// One rule for times: seconds, or a number with its unit. `--delay`, `--ack-timeout` and
    /// `--swap-time` took bare milliseconds in 0.1.0, which they still do for one release, with a warning.
    @Test func timesAreSecondsOrCarryTheirUnit() throws {
        let written = try TuningOptions.parse(["--delay", "2ms", "--ack-timeout", "0.75s"])
        #expect(written.tuning().interPacketDelay == .milliseconds(2))
        #expect(written.tuning().ackTimeout == .milliseconds(750))
        #expect(written.delay?.legacyMillisecondsWarning(option: "--delay") == nil)
        let bare = try TuningOptions.parse(["--delay", "2", "--ack-timeout", "750"])
        #expect(bare.tuning().interPacketDelay == .milliseconds(2) && bare.tuning().ackTimeout == .milliseconds(750))
        #expect(
            bare.delay?.legacyMillisecondsWarning(option: "--delay")
                == "warning: --delay 2 is read as 2 ms, as in 0.1.0; write --delay 2ms (from the next release a bare number means seconds, as in every time option)")
        #expect(try TuningOptions.parse(["--delay", "1500us"]).tuning().interPacketDelay == .microseconds(1500))
        // Options that always took seconds take a unit too; a bare number stays seconds.
        #expect(try DeviceOptions.parse(["--device", "sim://2m-dle", "--connect-timeout", "500ms"]).timeouts.connect == .milliseconds(500))
        #expect(try DeviceOptions.parse(["--device", "sim://2m-dle", "--connect-timeout", "2.5"]).timeouts.connect == .milliseconds(2500))
        #expect(try DeviceOptions.parse(["--device", "sim://2m-dle"]).timeouts.connect == .seconds(10))
        #expect(try FleetUpdateOptions.parse(["--backoff", "250ms"]).backoff == 0.25)
        // The old bare milliseconds warn on stderr from the real binary, and the transfer still runs.
        let legacy = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--delay", "1"])
        #expect(legacy.status == 0, "\(legacy.stderr)")
        #expect(legacy.stderr.contains("warning: --delay 1 is read as 1 ms"))
        let serve = try BleotaProcess.run(["sim", "serve", "--swap-time", "300", "--duration", "0"])
        #expect(serve.stderr.contains("warning: --swap-time 300 is read as 300 ms"), "\(serve.stderr)")
    }

    /// The README's first command with the documented default given explicitly: the seeded
    /// simulation sends exactly the same packets.
    @Test func theDefaultDelayGivenExplicitlyChangesNothing() throws {
        let device = "sim://slow-flash?loss=0.02&seed=7"
        let plain = try BleotaProcess.run(["flash", "samples/firmware/blinky.hex", "--device", device, "--json", "--no-saved-tuning"])
        let explicit = try BleotaProcess.run(["flash", "samples/firmware/blinky.hex", "--device", device, "--json", "--no-saved-tuning", "--delay", "0"])
        #expect(plain.status == 0 && explicit.status == 0, "\(plain.stderr)\(explicit.stderr)")
        func packets(_ run: BleotaProcess) throws -> [Int] {
            let document = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
            let statistics = try #require(document["statistics"] as? [String: Any], "\(document.keys)")
            return [statistics["packetsSent"] as? Int ?? -1, statistics["packetsResent"] as? Int ?? -1]
        }
        #expect(try packets(plain) == packets(explicit))
    }

    /// A listing never cuts what a user must type: every key `sim presets` lists is whole, and the
    /// address it names parses.
    @Test func simPresetsListsEveryKeyWhole() throws {
        let result = try BleotaProcess.run(["sim", "presets"])
        #expect(result.status == 0)
        let keys = result.stdout.components(separatedBy: "keys (sim://NAME?key=value&…):\n").last ?? ""
        let listed = keys.split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) }
        #expect(listed.contains("nordic-save-progress"), "\(listed)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(try BleotaProcess.run(["sim", "presets", "--json"]).stdout.utf8)) as? [String: Any])
        let known = Set(((document["keys"] as? [String: Any]) ?? [:]).keys)
        #expect(Set(listed) == known)
    }

    /// `sim serve` names the firmware version `--firmware-version`; `--version` is bleota's own.
    @Test func simServeTakesTheFirmwareVersionByItsName() throws {
        let help = try BleotaProcess.run(["sim", "serve", "--help"])
        #expect(help.stdout.contains("--firmware-version <firmware-version>"))
        #expect(!help.stdout.contains("--version <"))
    }

    @Test func inProcessRunMapsFailuresToExitStatus() async {
        #expect(await BleotaCommand.run(arguments: ["--version"]) == 0)
        #expect(await BleotaCommand.run(arguments: ["nonsense-subcommand"]) == 2)
    }
}
