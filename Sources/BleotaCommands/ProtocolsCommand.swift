import ArgumentParser
import BleotaEngine

/// `bleota protocols`: what this bleota speaks, and what each tuning knob means for each protocol.
struct ProtocolsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "protocols",
        abstract: "List the update protocols this bleota knows: transports, capabilities, flash modes and what each tuning knob means.")

    @OptionGroup var global: GlobalOptions
    @Option(name: .customLong("protocol-file"), help: ArgumentHelp("Also list the protocol this description (YAML) describes (repeatable).", valueName: "FILE"))
    var protocolFiles: [String] = []

    struct Entry: Codable {
        var name: String
        var displayName: String
        var summary: String
        var transports: [String]
        var gattServices: [String]
        var imageFormats: [String]
        var capabilities: String
        var flashModes: [String]
        var tuningKnobs: [String: String]
        var deviceOptions: [String: String]
        var hostOptions: [String: String]
    }

    func run() async throws {
        let entries = CommandContext.registry.protocols.map { item in
            Entry(
                name: item.name, displayName: item.identity.displayName, summary: item.identity.summary,
                transports: TransportKind.allCases.filter { item.identity.transports.contains($0) }.map(\.rawValue),
                gattServices: item.identity.gattServices.map { "\($0.name) \($0.service)" }, imageFormats: item.identity.imageFormats,
                capabilities: item.capabilities.summary, flashModes: item.flashModes.map(\.rawValue),
                tuningKnobs: Dictionary(uniqueKeysWithValues: item.tuningKnobs.map { ("--" + $0.key.rawValue, $0.value) }),
                deviceOptions: Dictionary(uniqueKeysWithValues: item.deviceOptions.map { ($0.key, $0.meaning) }),
                hostOptions: Dictionary(uniqueKeysWithValues: item.hostOptions.map { ($0.key, $0.meaning) }))
        }
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(entries))
            return
        }
        var lines: [String] = []
        for entry in entries {
            lines.append("\(entry.name): \(entry.displayName) — \(entry.summary)")
            lines.append("  transports: \(entry.transports.joined(separator: ", "))")
            if !entry.gattServices.isEmpty { lines.append("  GATT: \(entry.gattServices.joined(separator: "; "))") }
            lines.append("  images: \(entry.imageFormats.joined(separator: ", "))")
            lines.append("  can: \(entry.capabilities); flash modes: \(entry.flashModes.joined(separator: ", "))")
            for (knob, meaning) in entry.tuningKnobs.sorted(by: { $0.key < $1.key }) { lines.append("  \(knob): \(meaning)") }
            for (key, meaning) in entry.hostOptions.sorted(by: { $0.key < $1.key }) { lines.append("  --protocol-option \(key)=…: \(meaning)") }
            for (key, meaning) in entry.deviceOptions.sorted(by: { $0.key < $1.key }) { lines.append("  sim:// \(key)=…: \(meaning)") }
        }
        Terminal.standardOutput.writeLine(lines.joined(separator: "\n"))
    }
}
