import BleotaLink
import BleotaProtocols
import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaCommands

/// Protocol descriptions through the command line: `--protocol-file` on flash,
/// `protocol-file=` in a sim:// address, `sim serve --protocol-file`, and a
/// description with a mistake refused with its line and field.
@Suite struct DescribedProtocolCLITests {
    static let telink = "protocols/telink-ota.yaml"

    /// A Telink image (marker, size, CRC-32) of random content, written to a temporary file.
    static func telinkImage(seed: UInt64) throws -> (path: String, bytes: [UInt8]) {
        let description = try ProtocolDescription(contentsOf: BleotaProcess.repositoryRoot.appendingPathComponent(telink).path)
        var random = SeededRandom(seed: seed)
        let bytes = description.image.sample((0..<6000).map { _ in UInt8.random(in: 0...255, using: &random) })
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("telink-\(seed)-\(UUID()).bin").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        return (path, bytes)
    }

    @Test func flashWithADescriptionOnTheSimulator() throws {
        let image = try Self.telinkImage(seed: 11)
        defer { try? FileManager.default.removeItem(atPath: image.path) }
        let result = try BleotaProcess.run([
            "flash", image.path, "--protocol-file", Self.telink,
            "--device", "sim://2m-dle?protocol-file=\(Self.telink)", "--json",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(json["protocolName"] as? String == "telink-ota")
        #expect(json["bytes"] as? Int == image.bytes.count)
    }

    /// The version a description's commands carry is a number: text that is not one is refused
    /// before anything is sent, where it once went out as 0.
    @Test func aVersionOptionThatIsNoNumberIsRefused() throws {
        let image = try Self.telinkImage(seed: 14)
        defer { try? FileManager.default.removeItem(atPath: image.path) }
        let result = try BleotaProcess.run([
            "flash", image.path, "--protocol-file", Self.telink, "--device", "sim://2m-dle?protocol-file=\(Self.telink)",
            "--protocol-option", "version=2.0",
        ])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(
            result.stderr.hasSuffix("error: --protocol-option version=2.0: '2.0' is not a number of 64 bits: use a decimal or 0x-prefixed value\n"),
            "\(result.stderr)")
        let good = try BleotaProcess.run([
            "flash", image.path, "--protocol-file", Self.telink, "--device", "sim://2m-dle?protocol-file=\(Self.telink)",
            "--protocol-option", "version=0x0200",
        ])
        #expect(good.status == 0, "\(good.stderr)")
    }

    @Test func protocolsListsADescribedProtocolWithWhatItCanDo() throws {
        let result = try BleotaProcess.run(["protocols", "--protocol-file", "protocols/stm32wb-ota.yaml", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let entries = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])
        let wb = try #require(entries.first { $0["name"] as? String == "stm32wb-ota" })
        #expect((wb["summary"] as? String)?.contains("described in stm32wb-ota.yaml") == true)
        #expect((wb["gattServices"] as? [String])?.contains { $0.lowercased().contains("0000fe20-cc7a-482a-984a-7f2ed5b3e58f") } == true, "\(wb)")
        // The end activates, so a measurement would update the device: no tune.
        let tune = try BleotaProcess.run([
            "tune", "--protocol-file", Self.telink, "--device", "sim://2m-dle?protocol-file=\(Self.telink)",
            "--no-saved-tuning", "--image", "samples/telink/telink-app-sample.bin",
        ])
        #expect(tune.status == 2, "\(tune.stderr)")
        #expect(tune.stderr.contains("cannot tune"), "\(tune.stderr)")
    }

    @Test func theAddressAloneNamesTheProtocol() throws {
        let image = try Self.telinkImage(seed: 12)
        defer { try? FileManager.default.removeItem(atPath: image.path) }
        let result = try BleotaProcess.run(["flash", image.path, "--device", "sim://1m-no-dle-30ms?protocol-file=\(Self.telink)"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("flashed"), "\(result.stdout)")
    }

    @Test func anImageTheDeviceWouldNotBootIsRefusedBeforeConnecting() throws {
        var image = try Self.telinkImage(seed: 13)
        defer { try? FileManager.default.removeItem(atPath: image.path) }
        image.bytes[9] = 0
        _ = FileManager.default.createFile(atPath: image.path, contents: Data(image.bytes))
        let result = try BleotaProcess.run([
            "flash", image.path, "--protocol-file", Self.telink,
            "--device", "sim://2m-dle?protocol-file=\(Self.telink)&power-loss-at=0",
        ])
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stderr.contains("lacks the marker 4b 4e 4c 54 at offset 8 (image.checks): build it with the vendor's tools"), "\(result.stderr)")
    }

    /// Mistakes in a description: one line naming the file, the line and the field; exit 3.
    @Test(arguments: [
        ("name: Telink OTA", ":3: name: 'Telink OTA' must be lower-case letters"),
        ("service: not-a-uuid", ":4: service: 'not-a-uuid' is not a UUID"),
        ("    fields: [{u16: index}, payload, {crc16: crc-99}]", ":9: messages.data.fields[2].crc16: 'crc-99' is not a CRC-16 bleota knows"),
        ("  flow: {mode: ack, ack: data, every: 8}", ":14: transfer.flow.ack: 'data' carries no next-index"),
        ("  colour: red", ":15: transfer.colour: is not a key here"),
        ("  when-full: wait", ":15: transfer.when-full: 'wait' is neither drop nor hold"),
    ])
    func aDescriptionWithAMistakeNamesItsLineAndField(_ mistake: (String, String)) throws {
        var lines = [
            "bleota-protocol: 1",  // 1
            "display-name: Mine",  // 2
            "name: mine",  // 3
            "service: 1234",  // 4
            "characteristics:",  // 5
            "  data: {uuid: 1235, write: command, update: notify}",  // 6
            "messages:",  // 7
            "  data:",  // 8
            "    fields: [{u16: index}, payload, {crc16: modbus}]",  // 9
            "    characteristic: data",  // 10
            "  done: {characteristic: data, fields: [{bytes: \"02\"}]}",  // 11
            "update: {end: {send: done}}",  // 12
            "transfer:",  // 13
            "  flow: {mode: none}",  // 14
            "  packet: data",  // 15
        ]
        let (replacement, expected) = mistake
        let key = replacement.split(separator: ":").first!
        if let index = lines.firstIndex(where: { $0.split(separator: ":").first == key }) {
            lines[index] = replacement
        } else {
            lines[14] = replacement
            lines.append("  packet: data")
        }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("mine-\(UUID()).yaml").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(lines.joined(separator: "\n").utf8))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--protocol-file", path, "--device", "sim://2m-dle"])
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stderr.contains("error: \(path)\(expected)"), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1)
    }

    /// A description file that is not there, or not YAML: one line naming the file and what to do, exit 3.
    @Test func aMissingOrUnreadableDescriptionIsOneLine() throws {
        let missing = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--protocol-file", "no-such.yaml", "--device", "sim://2m-dle"])
        #expect(missing.status == 3, "\(missing.stderr)")
        #expect(missing.stderr == "error: no-such.yaml: cannot read the protocol description: check the path\n", "\(missing.stderr)")
        let notYAML = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle?protocol-file=samples/firmware/blinky.hex"])
        #expect(notYAML.status == 3, "\(notYAML.stderr)")
        #expect(notYAML.stderr.hasPrefix("error: samples/firmware/blinky.hex"), "\(notYAML.stderr)")
        #expect(notYAML.stderr.split(separator: "\n").count == 1)
    }

    @Test func aGoodDescriptionOfMyOwnFlashes() throws {
        let lines = [
            "bleota-protocol: 1", "name: mine", "service: 1234",
            "characteristics:", "  data: {uuid: 1235, write: command, update: notify}",
            "messages:",
            "  data: {characteristic: data, fields: [{u16: index}, payload, {crc16: modbus}]}",
            "  start: {characteristic: data, fields: [{bytes: \"01\"}, {u32: image-size}]}",
            "  done: {characteristic: data, fields: [{bytes: \"02\"}, {u32: image-crc32}]}",
            "  ack: {characteristic: data, fields: [{bytes: \"03\"}, {u16: next-index}, {u8: status}]}",
            "  result: {characteristic: data, fields: [{bytes: \"04\"}, {u8: status}]}",
            "update: {start: {send: start}, end: {send: done, answer: result}}",
            "transfer: {packet: data, flow: {mode: ack, ack: ack, every: 8}, gap: drop, bad-checksum: drop}",
            "statuses: {success: 0, codes: {1: {name: gap, means: gap}, 2: {name: crc, means: verify-failed}}}",
        ]
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("mine-\(UUID()).yaml").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(lines.joined(separator: "\n").utf8))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try BleotaProcess.run([
            "flash", "samples/firmware/blinky.bin", "--protocol-file", path,
            "--device", "sim://2m-dle?protocol-file=\(path)&loss=0.02&seed=3",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let clash = try BleotaProcess.run([
            "flash", "samples/firmware/blinky.bin", "--protocol-file", path, "--protocol", "smp",
            "--device", "sim://2m-dle?protocol-file=\(path)",
        ])
        #expect(clash.status == 2)
        #expect(clash.stderr.contains("--protocol smp and --protocol-file (which describes mine) disagree"), "\(clash.stderr)")
    }
}
