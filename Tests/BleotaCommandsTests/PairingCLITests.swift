import Foundation
import Testing

@testable import BleotaCommands

/// Pairing as a user meets it: a device that demands an authenticated link,
/// the passkey given or not, the report and --json saying what protects the link,
/// and a failure as one line with exit status 13.
@Suite struct PairingCLITests {
    static let device = "sim://2m-dle?security=authenticated"

    @Test func thePasskeyTheDeviceShowsPairsAndTheReportSaysHow() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device, "--passkey", "123456", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let security = try #require(report?["security"] as? [String: Any])
        #expect(security["level"] as? String == "fips")
        #expect(security["method"] as? String == "passkey-entry")
        #expect(security["secureConnections"] as? Bool == true)
        let text = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device, "--passkey", "123456"])
        #expect(text.stdout.contains("; security fips (encrypted, authenticated LE Secure Connections) by passkey entry, LE Secure Connections, bonded"))
    }

    @Test func aWrongPasskeyIsOneLineAndExit13() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device, "--passkey", "654321", "--quiet"])
        #expect(result.status == 13)
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1)
        #expect(
            lines.first
                == "error: \(Self.device): pairing failed at the device: confirm value failed (the passkeys did not match): check the passkey the device shows and give it with --passkey"
        )
        let json = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device, "--passkey", "654321", "--json"])
        let failure = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect(failure?["exitStatus"] as? Int == 13)
        #expect((failure?["error"] as? String)?.contains("confirm value failed") == true)
    }

    @Test func withoutAPasskeyOrATerminalTheErrorSaysWhatToGive() throws {
        // The test runner's stdin is not a terminal: nobody can be asked.
        let result = try BleotaProcess.run(["push", "samples/firmware/blinky.bin", "--device", Self.device, "--quiet"])
        #expect(result.status == 13)
        #expect(result.stderr.contains("the device asks for a passkey: give it with --passkey N, or run on a terminal to be asked"))
        let comparison = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device + "&device-io=yesno", "--quiet"])
        #expect(comparison.status == 13)
        #expect(comparison.stderr.contains("--accept-pairing"))
        let accepted = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device + "&device-io=yesno", "--accept-pairing", "--quiet"])
        #expect(accepted.status == 0, "\(accepted.stderr)")
    }

    @Test func aPasskeyThatIsNotSixDigitsIsAUsageError() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device, "--passkey", "12a456"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("--passkey '12a456' is not a passkey: give the six digits the device shows, e.g. --passkey 123456"))
        let long = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device, "--passkey", "1234567"])
        #expect(long.status == 2)
        // Read as a device list reads its passkey column: a sign is no digit (UInt32 alone took "+12345").
        let signed = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.device, "--passkey", "+12345"])
        #expect(signed.status == 2)
        #expect(signed.stderr.contains("--passkey '+12345' is not a passkey"))
    }

    @Test func bondListSaysWhereBondsAreAndRemoveNamesAMissingOne() throws {
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-state-\(UUID())")
        let list = try BleotaProcess.run(["bond", "list"], environment: ["XDG_STATE_HOME": state.path])
        #expect(list.status == 0)
        #expect(list.stdout == "no bonds (\(state.path)/bleota/bonds.json)\n")
        let remove = try BleotaProcess.run(["bond", "remove", "C0:FF:EE:00:00:01"], environment: ["XDG_STATE_HOME": state.path])
        #expect(remove.status == 3)
        #expect(remove.stderr.contains("no bond with C0:FF:EE:00:00:01"))
        // The address as every --device gives it names the same bond.
        let scheme = try BleotaProcess.run(["bond", "remove", "ble://C0:FF:EE:00:00:01?adapter=hci0"], environment: ["XDG_STATE_HOME": state.path])
        #expect(scheme.status == 3)
        #expect(scheme.stderr.contains("no bond with C0:FF:EE:00:00:01"), "\(scheme.stderr)")
        let bad = try BleotaProcess.run(["bond", "remove", "C0:FF:EE"], environment: ["XDG_STATE_HOME": state.path])
        #expect(bad.status == 2)
    }

    /// `bond pair` pairs Bluetooth devices only, and says so for any other address.
    @Test func bondPairTakesABluetoothDevice() throws {
        let run = try BleotaProcess.run(["bond", "pair", "--device", "sim://2m-dle"])
        #expect(run.status == 2)
        #expect(run.stderr == "error: bond pair pairs a Bluetooth device: give --device ble://AA:BB:CC:DD:EE:FF (a sim:// device has no pairing)\n")
    }
}

/// A device whose CCC descriptor is open but whose characteristic demands security (`ccc=open`):
/// the subscription succeeds on a plain link and every packet after it is dropped without a word.
@Suite struct SilentDropCLITests {
    static let encrypted = "sim://2m-dle?security=encrypted&ccc=open&device-io=none"
    static let authenticated = "sim://2m-dle?security=authenticated&ccc=open"

    /// No option says the device pairs: the connect goes unanswered, bleota connects once more and
    /// pairs Just Works before writing, and the image arrives.
    @Test func aSilentPlainLinkIsRetriedOnceEncrypted() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.encrypted, "--json", "--log-level", "notice"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("on a link at security low; a device may drop writes below the security it wants without a word: connecting again at security medium"))
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let security = try #require(report?["security"] as? [String: Any])
        #expect(security["method"] as? String == "just-works")
        #expect(report?["versionAfter"] as? String != nil)
    }

    /// --passkey says the device pairs: bleota pairs before its first write, so nothing goes unanswered.
    @Test func aGivenPasskeyPairsBeforeTheFirstWrite() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.authenticated, "--passkey", "123456", "--json", "--log-level", "notice"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!result.stderr.contains("connecting again"), "\(result.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let security = try #require(report?["security"] as? [String: Any])
        #expect(security["method"] as? String == "passkey-entry")
        #expect(security["level"] as? String == "fips")
    }

    @Test func aWrongPasskeyIsOneLineAndExit13() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.authenticated, "--passkey", "654321", "--quiet"])
        #expect(result.status == 13)
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        #expect(result.stderr.contains("pairing failed at the device: confirm value failed"))
    }

    /// No passkey and no terminal: the retry can only ask for what the device can be paired to
    /// without input, and the one line says what to give.
    @Test func withoutAPasskeyOffATerminalTheOneLineSaysToGiveIt() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", Self.authenticated, "--quiet"])
        #expect(result.status == 13)
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(result.stderr)")
        #expect(lines.first?.contains("--passkey") == true, "\(result.stderr)")
    }

    @Test func cccTakesOpenOrProtected() throws {
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle?ccc=ajar", "--quiet"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("sim:// key 'ccc' is open or protected, got 'ajar'"), "\(result.stderr)")
    }
}
