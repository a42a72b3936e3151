import ArgumentParser
import Foundation
import Testing

@testable import BleotaCommands

/// Every command's `--help`, rendered in-process at 80 columns, against the text kept in
/// `Golden/help/`: a change to an option's name, unit, default or wording shows up in review as a
/// change to these files. After an intended change, regenerate them with
/// `BLEOTA_UPDATE_GOLDEN=1 swift test --filter HelpGoldenTests` and read the diff.
@Suite struct HelpGoldenTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden/help")

    /// Every command, with the words that name it (`["fleet", "campaign", "create"]`).
    static let commands: [(words: [String], type: ParsableCommand.Type)] = {
        var found: [(words: [String], type: ParsableCommand.Type)] = []
        func visit(_ type: ParsableCommand.Type, _ words: [String]) {
            found.append((words, type))
            for sub in type.configuration.subcommands { visit(sub, words + [sub._commandName]) }
        }
        visit(BleotaCommand.self, [])
        return found
    }()

    static func file(for words: [String]) -> URL {
        directory.appendingPathComponent((["bleota"] + words).joined(separator: "-") + ".txt")
    }

    @Test func everyCommandsHelpMatchesItsGoldenText() throws {
        let update = ProcessInfo.processInfo.environment["BLEOTA_UPDATE_GOLDEN"] == "1"
        if update { try FileManager.default.createDirectory(at: Self.directory, withIntermediateDirectories: true) }
        for (words, type) in Self.commands {
            let help = BleotaCommand.helpMessage(for: type, columns: 80) + "\n"
            let file = Self.file(for: words)
            if update {
                try help.write(to: file, atomically: true, encoding: .utf8)
                continue
            }
            let golden = try? String(contentsOf: file, encoding: .utf8)
            #expect(golden != nil, "no golden help for 'bleota \(words.joined(separator: " "))': run with BLEOTA_UPDATE_GOLDEN=1")
            guard let golden else { continue }
            // The first differing line, so a failure reads as what changed.
            let mismatch = zip(help.split(separator: "\n", omittingEmptySubsequences: false), golden.split(separator: "\n", omittingEmptySubsequences: false))
                .enumerated().first { $0.element.0 != $0.element.1 }
            #expect(
                help == golden,
                "bleota \(words.joined(separator: " ")) --help changed at line \((mismatch?.offset ?? 0) + 1): \(mismatch.map { "'\($0.element.1)' → '\($0.element.0)'" } ?? "length")"
            )
        }
    }

    /// No golden file is left for a command that no longer exists.
    @Test func noGoldenTextForACommandThatIsGone() throws {
        let expected = Set(Self.commands.map { Self.file(for: $0.words).lastPathComponent })
        let present = Set(try FileManager.default.contentsOfDirectory(atPath: Self.directory.path))
        #expect(present.subtracting(expected).isEmpty, "\(present.subtracting(expected).sorted())")
    }

    /// Every command's help says what it is for and how to call it, and lists --help.
    @Test func everyCommandHasHelpWithAnOverviewAndUsage() {
        for (words, type) in Self.commands {
            let help = BleotaCommand.helpMessage(for: type, columns: 80)
            #expect(help.hasPrefix("OVERVIEW: "), "bleota \(words.joined(separator: " "))")
            #expect(help.contains("USAGE: bleota"), "bleota \(words.joined(separator: " "))")
            #expect(help.contains("-h, --help"), "bleota \(words.joined(separator: " "))")
        }
    }
}
