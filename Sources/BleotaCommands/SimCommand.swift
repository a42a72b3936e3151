import ArgumentParser
import BleotaSimulator
import Foundation

/// `bleota sim …`: what the built-in simulator offers.
struct SimCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sim",
        abstract: "The built-in BLE simulator: presets and address keys.",
        subcommands: [SimPresets.self, SimServe.self]
    )
}

struct SimPresets: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "presets",
        abstract: "List the link presets and the keys a sim:// address accepts.",
        discussion: "The timing model and the sources of each preset's numbers are in protocols/link-model.md."
    )

    @OptionGroup var global: GlobalOptions

    struct PresetReport: Codable {
        var name: String
        var summary: String
        var model: LinkModel
        /// Bytes per second of 244-byte (or MTU − 3) writes the model allows.
        var capacity: Double
    }

    func run() async throws {
        let presets = LinkPreset.all.map {
            PresetReport(
                name: $0.name, summary: $0.summary, model: $0.model,
                capacity: $0.model.linkCapacity)
        }
        if global.json {
            struct Output: Codable {
                var presets: [PresetReport]
                var keys: [String: String]
            }
            let keys = Dictionary(uniqueKeysWithValues: SimulatorAddress.keys(CommandContext.registry).map { ($0.key, $0.meaning) })
            Terminal.standardOutput.writeLine(try JSONOutput.string(Output(presets: presets, keys: keys)))
            return
        }
        // Names are what a user types: the columns are as wide as the longest, never cut.
        let keys = SimulatorAddress.keys(CommandContext.registry)
        let presetWidth = max(16, (presets.map(\.name.count).max() ?? 0) + 1)
        let keyWidth = max(16, (keys.map(\.key.count).max() ?? 0) + 1)
        var lines = ["presets (sim://NAME):"]
        for preset in presets {
            lines.append("  \(preset.name.padding(toLength: presetWidth, withPad: " ", startingAt: 0)) \(formatBytes(Int(preset.capacity)))/s  \(preset.summary)")
        }
        lines.append("")
        lines.append("keys (sim://NAME?key=value&…):")
        for (key, meaning) in keys {
            lines.append("  \(key.padding(toLength: keyWidth, withPad: " ", startingAt: 0)) \(meaning)")
        }
        Terminal.standardOutput.writeLine(lines.joined(separator: "\n"))
    }
}
