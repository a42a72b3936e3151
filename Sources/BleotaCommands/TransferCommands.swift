import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSystem
import Foundation
import Logging
import Synchronization

/// `bleota push`: put a file into the device's file store.
struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Store a file on the device (kept only if it verifies).")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var tuningOptions: TuningOptions
    @OptionGroup var protocolOption: ProtocolChoice
    @Option(name: .long, help: "Name on the device (default: the file's name; protocols with a mounted file system put relative names under it, e.g. /lfs/).") var name: String?
    @Argument(help: "The file to send.") var file: String

    func run() async throws {
        let logger = global.makeLogger("bleota.push")
        let bytes = try readInputFile(file)
        let remoteName = name ?? URL(fileURLWithPath: file).lastPathComponent
        guard !remoteName.isEmpty, remoteName.utf8.count <= 255 else {
            throw ValidationError("--name must be 1…255 bytes of UTF-8")
        }
        let updateProtocol = try await deviceOptions.device.resolveProtocol(
            explicit: protocolOption.name, needs: .push,
            timeout: deviceOptions.timeouts.connect, pairing: deviceOptions.pairing.policy, logger: logger)
        try tuningOptions.check(against: updateProtocol)
        let outcome = try await withHost(updateProtocol, global: global, device: deviceOptions, tuning: tuningOptions, logger: logger) {
            try await $0.push(bytes, name: remoteName)
        }
        try printReport(outcome, json: global.json) { report in
            "pushed '\(remoteName)' (\(formatBytes(report.bytes))) to \(report.device): \(summary(report))"
        }
    }
}

/// `bleota pull`: fetch a file from the device's file store.
struct PullCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull",
        abstract: "Fetch a file from the device; written atomically and only after its hash verifies.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var tuningOptions: TuningOptions
    @OptionGroup var protocolOption: ProtocolChoice
    @Option(name: [.short, .customLong("output")], help: "Where to write the file.") var output: String
    @Argument(help: "The file's name on the device (protocols with a mounted file system look relative names up under it).") var name: String

    func validate() throws {
        if output.isEmpty { throw ValidationError("-o/--output is empty: give the file to write, e.g. -o hello.txt") }
    }

    func run() async throws {
        let logger = global.makeLogger("bleota.pull")
        let name = self.name
        try checkOutputPath(output)  // before connecting: a typo must not cost a transfer
        let updateProtocol = try await deviceOptions.device.resolveProtocol(
            explicit: protocolOption.name, needs: .pull,
            timeout: deviceOptions.timeouts.connect, pairing: deviceOptions.pairing.policy, logger: logger)
        try tuningOptions.check(against: updateProtocol)
        let outcome = try await withHost(updateProtocol, global: global, device: deviceOptions, tuning: tuningOptions, logger: logger) {
            try await $0.pull(name)
        }
        try writeFileAtomically(outcome.value.bytes, to: output)
        let pulled = SessionOutcome(
            value: outcome.value.report, linkCapacity: outcome.linkCapacity, deviceCapacity: outcome.deviceCapacity,
            linkModel: outcome.linkModel,
            connection: outcome.connection, security: outcome.security)
        try printReport(pulled, json: global.json) { report in
            "pulled '\(name)' (\(formatBytes(report.bytes))) from \(report.device) to \(output): \(summary(report))"
        }
    }
}
