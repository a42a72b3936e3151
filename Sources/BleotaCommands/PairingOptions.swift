import ArgumentParser
import BleotaLink
import Foundation

/// `--passkey` and `--accept-pairing`: what to answer when a device demands an
/// authenticated link, for every command that talks to a device.
///
/// Left out on a terminal, bleota asks there; left out elsewhere, it can pair
/// only Just Works and says what to give when a device wants more.
struct PairingOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The six-digit passkey the device shows, for passkey-entry pairing (asked on a terminal when left out).", valueName: "NNNNNN"))
    var passkey: String?

    @Flag(name: .long, help: "Accept a numeric-comparison pairing without asking (for scripts: check the number on the device where you can).")
    var acceptPairing = false

    func validate() throws {
        if let passkey, Self.parse(passkey) == nil {
            throw ValidationError("--passkey '\(passkey)' is not a passkey: give the six digits the device shows, e.g. --passkey 123456")
        }
    }

    static func parse(_ text: String) -> UInt32? { PairingPolicy.passkey(parsing: text) }

    /// The agent these options make: a terminal prompt when stdin and stderr are a terminal.
    var policy: PairingPolicy {
        let interactive = isatty(STDIN_FILENO) == 1 && Terminal.standardError.isInteractive
        return PairingPolicy(
            passkey: passkey.flatMap(Self.parse), acceptsComparison: acceptPairing,
            prompt: interactive ? TerminalPairingPrompt() : nil)
    }
}

/// Asks the person at the terminal (stderr for the question, stdin for the answer).
/// The read runs on a thread of its own, so no task of the process blocks on a person.
struct TerminalPairingPrompt: PairingPrompt {
    func readPasskey(_ question: String) async -> UInt32? {
        guard let answer = await ask(question) else { return nil }
        return PairingOptions.parse(answer.trimmingCharacters(in: .whitespaces))
    }

    func confirm(_ question: String) async -> Bool {
        guard let answer = await ask(question)?.trimmingCharacters(in: .whitespaces).lowercased() else { return false }
        return answer == "y" || answer == "yes"
    }

    func show(_ line: String) async { Terminal.standardError.writeLine(line) }

    private func ask(_ question: String) async -> String? {
        Terminal.standardError.write(question)
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: readLine(strippingNewline: true)) }
        }
    }
}
