import ArgumentParser
import BleotaEngine
import BleotaProtocols
import Foundation
import Logging

/// The `bleota` command line, as a library so it can be tested in-process.
///
/// Every subcommand is an `AsyncParsableCommand` with `--help`; the ones that
/// report results accept `--json`. Failures are ``CommandFailure`` values that
/// carry the exit status (see ``ExitStatus``) and a one-line message saying what
/// went wrong and what to do; ``BleotaCommand/run(arguments:registry:)`` is the single
/// place that turns them into text on stderr and a process exit code.
public struct BleotaCommand: AsyncParsableCommand {
    public static let version = "0.2.0"

    public static let configuration = CommandConfiguration(
        commandName: "bleota",
        abstract: "Reliable file transfer and OTA/DFU firmware updates to Bluetooth Low Energy devices.",
        discussion: """
            Devices are named by address: sim://PRESET?key=value (the built-in simulator), \
            ble://AA:BB:CC:DD:EE:FF, udp://HOST:PORT, serial:///dev/ttyACM0.

            Exit status: 0 success, 1 failure, 2 usage error, 3 bad input file, \
            4 device refused or reported an error, 5 verification failed, \
            6 link lost or device not found, 7 Bluetooth unavailable on this machine, \
            8 the update failed late but the device runs the new image unconfirmed, \
            9 the update failed late and the device could not be reached to tell what it runs; \
            10 (fleet) some devices run the image, others failed or were not started; 11 (fleet) none does; \
            12 (fleet campaign) the campaign database could not be reached or refused; \
            13 the link could not get the security the device demands (pairing failed or was refused); \
            130 interrupted by Ctrl-C or SIGTERM (the message says what the device runs).
            """,
        version: version,
        subcommands: [
            FlashCommand.self, FleetCommand.self, PushCommand.self, PullCommand.self, TuneCommand.self, ImageCommand.self, EchoCommand.self, ResetCommand.self,
            ProtocolsCommand.self, SimCommand.self, ServeCommand.self, GattCommand.self, ScanCommand.self, BondCommand.self, DeltaCommand.self,
        ]
    )

    public init() {}

    /// Parses `arguments`, runs the command with the protocols of `registry`
    /// (bleota's built-in ones unless a vendor's executable passes its own) and
    /// returns the process exit status; everything user-visible on failure goes
    /// to `stderr` as one line, and with `--json` also to stdout as an object.
    public static func run(arguments: [String], registry: ProtocolRegistry = .builtIn) async -> Int32 {
        let extended: ProtocolRegistry
        do { extended = try registering(describedProtocolsIn: arguments, into: registry) } catch {
            Terminal.standardError.writeLine("error: \(error.description)")
            if arguments.contains("--json"), let json = try? JSONOutput.string(FailureReport(CommandFailure(.badInput, error.description))) {
                Terminal.standardOutput.writeLine(json)
            }
            return ExitStatus.badInput.rawValue
        }
        return await CommandContext.$registry.withValue(extended) { await run(parsing: joiningNegativeValues(arguments)) }
    }

    /// `--delay -1` as `--delay=-1`: argument-parser takes a value that starts with a dash for an
    /// option name ("Missing value for '--delay'"), but bleota has no option that looks like a
    /// negative number, so such a value is the user's and its own check names what is wrong with it.
    static func joiningNegativeValues(_ arguments: [String]) -> [String] {
        var joined: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--" {
                joined += arguments[index...]
                break
            }
            if argument.hasPrefix("--"), !argument.contains("="), index + 1 < arguments.count, looksNegative(arguments[index + 1]) {
                joined.append("\(argument)=\(arguments[index + 1])")
                index += 2
            } else {
                joined.append(argument)
                index += 1
            }
        }
        return joined
    }

    private static func looksNegative(_ text: String) -> Bool {
        guard text.hasPrefix("-"), text.count > 1 else { return false }
        let rest = text.dropFirst()
        return rest.first.map { $0.isNumber || $0 == "." } ?? false
    }

    /// The words naming the subcommand `arguments` call (`["fleet", "flash"]`), and its type.
    /// The failure as `--json` prints it: one document, or, for a command whose output is a stream of JSON
    /// Lines, one more line of that stream (`"event": "failure"`), so the stream stays one object a line.
    static func failureJSON(_ failure: CommandFailure, arguments: [String]) -> String? {
        var report = FailureReport(failure)
        guard subcommand(in: arguments).type is any StreamsJSONLines.Type else { return try? JSONOutput.string(report) }
        report.event = "failure"
        return try? JSONOutput.string(report, pretty: false)
    }

    static func subcommand(in arguments: [String]) -> (words: [String], type: ParsableCommand.Type) {
        var current: ParsableCommand.Type = BleotaCommand.self
        var words: [String] = []
        for argument in arguments {
            guard let next = current.configuration.subcommands.first(where: { $0._commandName == argument || $0.configuration.aliases.contains(argument) })
            else { break }
            words.append(argument)
            current = next
        }
        return (words, current)
    }

    /// The first line of argument-parser's message, with the list of valid values it puts on the lines
    /// below ("Please provide one of the following:" then "- trace", "- debug", …) joined onto it.
    static func oneLine(_ text: String) -> String? {
        let lines = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        guard var first = lines.first else { return nil }
        if first.hasSuffix(":") {
            let items = lines.dropFirst().prefix { $0.hasPrefix("- ") }.map { "'\($0.dropFirst(2))'" }
            if !items.isEmpty { first += " " + items.joined(separator: ", ") }
        }
        return first
    }

    /// The names of `type`'s subcommands, for "did you mean".
    static func subcommandNames(of type: any ParsableCommand.Type) -> [String] {
        var names: [String] = []
        for subcommand in type.configuration.subcommands { names.append(subcommand._commandName) }
        return names
    }

    /// argument-parser's usage error as bleota words its own: one line `error: …`, then the
    /// usage on a second line with where to read more.
    static func usageError(_ error: Error, arguments: [String]) -> (message: String, usage: String) {
        var message = oneLine(message(for: error)) ?? String(describing: error)
        if message.hasPrefix("Error: ") { message.removeFirst("Error: ".count) }
        if let first = message.first, first.isUppercase, message.dropFirst().first?.isLowercase == true {
            message = first.lowercased() + message.dropFirst()
        }
        let (words, type) = subcommand(in: arguments)
        // A misspelt command (`bleota flsh`) gets the nearest one, as a misspelt option does.
        if message.hasPrefix("unexpected argument '"), let typed = message.split(separator: "'").dropFirst().first,
            !typed.hasPrefix("-"),
            let near = NameSuggestion.closest(to: String(typed), among: subcommandNames(of: type))
        {
            message += " (did you mean '\(near)'?)"
        }
        let usage = usageString(for: type).split(whereSeparator: \.isWhitespace).joined(separator: " ")
        let help = (["bleota"] + words + ["--help"]).joined(separator: " ")
        return (message, "usage: \(usage) (see '\(help)')")
    }

    /// The registry with every protocol description the arguments name added:
    /// `--protocol-file FILE` and a `sim://…?protocol-file=FILE` address. They are read
    /// before the arguments are parsed because addresses are checked against the
    /// registry as they are parsed. A description with a mistake is an error naming its line and field.
    static func registering(describedProtocolsIn arguments: [String], into registry: ProtocolRegistry) throws(ProtocolDescriptionError) -> ProtocolRegistry {
        var paths: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--protocol-file", index + 1 < arguments.count {
                paths.append(arguments[index + 1])
                index += 1
            } else if argument.hasPrefix("--protocol-file=") {
                paths.append(String(argument.dropFirst("--protocol-file=".count)))
            } else if argument.hasPrefix("sim://"), let query = argument.split(separator: "?", maxSplits: 1).dropFirst().first {
                for pair in query.split(separator: "&") where pair.hasPrefix("protocol-file=") {
                    paths.append(String(pair.dropFirst("protocol-file=".count)))
                }
            }
            index += 1
        }
        var result = registry
        for path in paths {
            let described = try DescribedProtocol(contentsOf: path)
            if let clash = registry.named(described.name), !(clash is DescribedProtocol) {
                throw ProtocolDescriptionError(
                    source: path, line: nil, field: "name",
                    problem: "'\(described.name)' is a built-in protocol's name: give the description another")
            }
            result = result.registering(described)
        }
        return result
    }

    private static func run(parsing arguments: [String]) async -> Int32 {
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            return ExitStatus.success.rawValue
        } catch let failure as CommandFailure {
            Terminal.standardError.writeLine("error: \(failure.message)")
            if arguments.contains("--json"), !failure.reportedInJSON, let json = failureJSON(failure, arguments: arguments) {
                Terminal.standardOutput.writeLine(json)
            }
            return failure.status.rawValue
        } catch {
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            if code == .success {
                if !message.isEmpty { Terminal.standardOutput.writeLine(message) }
                return ExitStatus.success.rawValue
            }
            if code == .validationFailure {
                // argument-parser's usage errors, in bleota's style and with its exit status.
                let (line, usage) = usageError(error, arguments: arguments)
                Terminal.standardError.writeLine("error: \(line)")
                Terminal.standardError.writeLine(usage)
                if arguments.contains("--json"), let json = failureJSON(CommandFailure(.usage, line), arguments: arguments) {
                    Terminal.standardOutput.writeLine(json)
                }
                return ExitStatus.usage.rawValue
            }
            Terminal.standardError.writeLine("error: \(message.isEmpty ? String(describing: error) : message)")
            return ExitStatus.failure.rawValue
        }
    }
}

/// Process exit codes, documented in the README, docs/commands.md and `bleota --help`.
public enum ExitStatus: Int32, Sendable, Codable {
    case success = 0
    /// Anything not covered below.
    case failure = 1
    /// The command line was wrong (unknown option, value out of range).
    case usage = 2
    /// An input file is missing, unreadable or malformed.
    case badInput = 3
    /// The device refused a request or reported an error.
    case deviceError = 4
    /// The image or file failed verification (CRC, hash or signature).
    case verificationFailed = 5
    /// The link dropped and could not be recovered, or the device was not found.
    case linkLost = 6
    /// This machine has no usable Bluetooth (no kernel support, no adapter, adapter down, no permission).
    case bluetoothUnavailable = 7
    /// The update failed after the activation reached the device, which now runs the new image
    /// unconfirmed: the bootloader reverts it at the next reset unless it is confirmed.
    case newImageUnconfirmed = 8
    /// The update failed after the activation may have reached the device, which could not be
    /// reached again to find out what it runs.
    case deviceStateUnknown = 9
    /// `fleet`: some devices run the image, others failed or were not started.
    case fleetPartial = 10
    /// `fleet`: not one device runs the image.
    case fleetNone = 11
    /// `fleet campaign`, `worker`, `status`: the campaign database could not be reached, refused the
    /// login or a query, or was migrated by a newer bleota.
    case campaignDatabase = 12
    /// The device demands a secure link and pairing failed (wrong passkey, a comparison not
    /// confirmed, no answer, the device's reason), or could not authenticate; nothing was written.
    case pairingFailed = 13
    /// Ctrl-C (SIGINT) stopped a transfer; the message says where and what the device runs.
    /// 128 + SIGINT, what shells report for a process a Ctrl-C ended.
    case interrupted = 130
}

/// A failure the CLI reports as one line and an exit status.
public struct CommandFailure: Error, Sendable, CustomStringConvertible {
    public var status: ExitStatus
    public var message: String
    /// Where a transfer failed and what the device runs since, when known.
    public var details: FailureDetails?
    /// The command already printed its one `--json` document, with the error in
    /// it: stdout must not get a second one (`jq` and `json.load` reject two).
    public var reportedInJSON: Bool
    /// The update's failure this reports, when it is one: a fleet reports that, not the command's wording.
    public var transferError: TransferError?
    public init(
        _ status: ExitStatus, _ message: String, details: FailureDetails? = nil, reportedInJSON: Bool = false, transferError: TransferError? = nil
    ) {
        self.status = status
        self.message = message
        self.details = details
        self.reportedInJSON = reportedInJSON
        self.transferError = transferError
    }
    public var description: String { message }
}

/// What `--json` adds about a failed transfer.
public struct FailureDetails: Sendable, Codable {
    public var step: String
    public var code: String
    /// What the device runs after a late failure: new-image-confirmed, new-image-unconfirmed, old-image, unknown.
    public var deviceState: String?
    public var deviceVersion: String?

    init(step: String, code: String, deviceState: String?) {
        self.step = step
        self.code = code
        self.deviceState = deviceState
    }

    init(_ error: TransferError) {
        step = error.step.rawValue
        code = error.code.rawValue
        deviceState = error.outcome?.name
        if case .oldImage(let version)? = error.outcome { deviceVersion = version }
    }
}

/// The object `--json` prints on stdout when a command fails.
///
/// Every command's failure has the same keys (docs/commands.md, "JSON"): `error`, `code`,
/// `step` (null outside an update's steps) and `exitStatus` always; `deviceState` and
/// `deviceVersion` when known.
struct FailureReport: Codable {
    /// Set in a JSON Lines stream, whose lines each say what they are.
    var event: String?
    var error: String
    var exitStatus: Int32
    var step: String?
    var code: String
    var deviceState: String?
    var deviceVersion: String?

    init(_ failure: CommandFailure) {
        error = failure.message
        exitStatus = failure.status.rawValue
        step = failure.details?.step
        code = failure.details?.code ?? String(describing: failure.status)
        deviceState = failure.details?.deviceState
        deviceVersion = failure.details?.deviceVersion
    }

    private enum CodingKeys: String, CodingKey { case event, error, exitStatus, step, code, deviceState, deviceVersion }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(event, forKey: .event)
        try container.encode(error, forKey: .error)
        try container.encode(code, forKey: .code)
        try container.encode(step, forKey: .step)
        try container.encode(exitStatus, forKey: .exitStatus)
        try container.encodeIfPresent(deviceState, forKey: .deviceState)
        try container.encodeIfPresent(deviceVersion, forKey: .deviceVersion)
    }
}

/// A command whose `--json` output is a stream of JSON Lines (README, "JSON and units"): its failure is
/// one more line of the stream.
protocol StreamsJSONLines {}

/// Options every command shares.
public struct GlobalOptions: ParsableArguments, Sendable {
    @Flag(name: .long, help: "Print machine-readable JSON on stdout instead of text.")
    public var json = false

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical (default: warning; info with -v).")
    public var logLevel: Logger.Level?

    @Flag(name: [.short, .long], help: "Shorthand for --log-level info (an explicit --log-level wins).")
    public var verbose = false

    public init() {}

    /// Sets up swift-log once per process, writing to stderr so JSON on stdout stays clean.
    public func makeLogger(_ label: String) -> Logger {
        // What the user wrote wins: -v --log-level error logs errors only.
        let level = logLevel ?? (verbose ? .info : .warning)
        LoggingSetup.bootstrapOnce()
        var logger = Logger(label: label)
        logger.logLevel = level
        return logger
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {
    /// Named, so that a wrong level is answered with the list (ArgumentParser found none to list).
    public static var allValueStrings: [String] { allCases.map(\.rawValue) }
}

enum LoggingSetup {
    private static let once: Void = {
        LoggingSystem.bootstrap { label in StreamLogHandler.standardError(label: label) }
    }()
    static func bootstrapOnce() { _ = once }
}

/// Shared JSON output: sorted keys so output is stable for scripts and tests.
enum JSONOutput {
    /// Pretty by default; `pretty: false` for one object a line (a fleet's event stream).
    static func string(_ value: some Encodable, pretty: Bool = true) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        // Times as RFC 3339 with milliseconds (2026-11-24T04:07:59.353Z): what other tools parse.
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            try container.encode(formatter.string(from: date))
        }
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
