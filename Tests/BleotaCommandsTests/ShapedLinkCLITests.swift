import Foundation
import Testing

/// `sim serve --link PRESET`: a client over UDP or serial meets the preset's BLE link, and a
/// bleota host there sends as it does on the same preset's `sim://` link — no resends at 0 % loss
/// (issue 48, item 2). Counts only: the transfers run in real time, so nothing here is timed.
@Suite struct ShapedLinkCLITests {
    /// `sim serve` with `arguments`, and the place it prints it serves on (`127.0.0.1:PORT`, a pseudo-terminal's path).
    static func serve(_ arguments: [String]) throws -> (Process, String) {
        let served = try ServedDevice.start(["--duration", "120"] + arguments)
        return (served.process, try served.place())
    }

    /// `flash … --json`'s report.
    static func flash(_ arguments: [String]) throws -> [String: Any] {
        let run = try BleotaProcess.run(["flash"] + arguments + ["--json"])
        #expect(run.status == 0, "\(run.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stdout)\n\(run.stderr)")
    }

    static func counts(_ report: [String: Any]) -> (sent: Int, resent: Int) {
        let statistics = report["statistics"] as? [String: Any] ?? [:]
        return (statistics["packetsSent"] as? Int ?? 0, statistics["packetsResent"] as? Int ?? -1)
    }

    /// The native protocol over UDP behind `1m-no-dle-30ms`: the device says it takes what an ATT MTU of
    /// 23 carries, so the host sends the packets it sends on `sim://1m-no-dle-30ms` — as many, as large,
    /// none resent. Before, it read a 244-byte maximum, sent packets of 244 bytes that each took 13 writes
    /// and four connection events, and resent 16 of 64 with nothing lost.
    @Test func nativeOverAShapedLinkSendsAsOnTheSimulatedOne() throws {
        let (server, place) = try Self.serve(["--protocol", "native", "--link", "1m-no-dle-30ms", "--udp", "127.0.0.1:0"])
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let image = "samples/firmware/blinky.bin"
        let shaped = try Self.flash([image, "--device", "udp://\(place)", "--protocol", "native"])
        let simulated = try Self.flash([image, "--device", "sim://1m-no-dle-30ms"])
        let (sent, resent) = Self.counts(shaped)
        #expect(sent > 0 && resent * 100 < sent, "\(resent) of \(sent) resent: \(shaped)")
        #expect(shaped["packetSize"] as? Int == simulated["packetSize"] as? Int, "\(shaped)\n\(simulated)")
        #expect(sent == Self.counts(simulated).sent + resent, "\(shaped)\n\(simulated)")
    }

    /// SMP over UDP behind `2m-dle` (a request spans writes there, as over BLE): no request resent.
    @Test func smpOverAShapedLinkResendsNothing() throws {
        let (server, place) = try Self.serve(["--link", "2m-dle", "--udp", "127.0.0.1:0"])
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let report = try Self.flash(["samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "udp://\(place)"])
        let (sent, resent) = Self.counts(report)
        #expect(sent > 0 && resent * 100 < sent, "\(resent) of \(sent) resent: \(report)")
    }

    /// Nordic's Secure DFU runs over serial, not UDP: a serial bootloader behind `2m-dle`, each SLIP
    /// frame a message of the link. Nothing resent (so before as well: its frames fit the serial MTU).
    @Test func nordicSecureDFUOverAShapedSerialLinkResendsNothing() throws {
        let (server, place) = try Self.serve(["--protocol", "nordic-dfu", "--serial", "--device-option", "nordic-start=bootloader", "--link", "2m-dle"])
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let package = "Tests/BleotaProtocolsTests/Fixtures/nordic/nrfutil-6.1.7-app-unsigned.zip"
        let report = try Self.flash([package, "--device", "serial://\(place)", "--protocol", "nordic-dfu"])
        let (sent, resent) = Self.counts(report)
        #expect(sent > 0 && resent * 100 < sent, "\(resent) of \(sent) resent: \(report)")
    }
}
