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

    static func run(
        _ arguments: [String], currentDirectory: URL? = nil, configHome: URL = BleotaProcess.configHome,
        environment extra: [String: String] = [:]
    ) throws -> BleotaProcess {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.currentDirectoryURL = currentDirectory ?? repositoryRoot
        // Saved tunings go to a directory of this test run, never the user's own.
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_CONFIG_HOME"] = configHome.path
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
        #expect(result.stderr.contains("Unknown option '--no-such-option'"))
    }

    @Test func inProcessRunMapsFailuresToExitStatus() async {
        #expect(await BleotaCommand.run(arguments: ["--version"]) == 0)
        #expect(await BleotaCommand.run(arguments: ["nonsense-subcommand"]) == 2)
    }
}
