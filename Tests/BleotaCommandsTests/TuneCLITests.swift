import Foundation
import Testing

@testable import BleotaCommands

@Suite struct TuneCLITests {
    @Test func tunePicksACleanSettingSavedOnlyBecauseItsClosedLoopBeatsTheDefaultAndFlashStartsFromIt() throws {
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tune-\(UUID())")
        let plot = config.appendingPathComponent("tune.svg")
        try FileManager.default.createDirectory(at: config, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: config) }
        // A link whose controller settled on 200-byte link-layer fragments, which a host over BlueZ
        // cannot learn: bleota's default writes (495 bytes, two fragments of the usual 251) take three
        // there, and only a measurement finds a size that takes two.
        let tune = try BleotaProcess.run(["tune", "--device", "sim://linux-bluez?dle=200&seed=3", "--json", "--plot", plot.path], configHome: config)
        #expect(tune.status == 0, "\(tune.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(tune.stdout.utf8)) as? [String: Any])
        let chosen = try #require(report["chosen"] as? [String: Any])
        let reference = try #require(report["reference"] as? [String: Any])
        let defaultLoop = try #require(report["defaultClosedLoop"] as? [String: Any])
        let chosenLoop = try #require(report["chosenClosedLoop"] as? [String: Any])
        let trials = try #require(report["trials"] as? [[String: Any]])
        #expect((chosen["loss"] as? Double ?? 1) < 0.01, "the choice loses under 1 %")
        #expect((chosen["goodput"] as? Double ?? 0) > (reference["goodput"] as? Double ?? .infinity), "and beats the default held fixed")
        // Saved because flash, pacing from it, is faster than flash pacing from the default.
        #expect((chosenLoop["goodput"] as? Double ?? 0) > (defaultLoop["goodput"] as? Double ?? .infinity))
        #expect(report["saved"] as? Bool == true)
        #expect(trials.count * 4 <= (report["gridSize"] as? Int ?? 0), "in at most a quarter of the grid's trials")
        // Saved under the device's identity (the seed is not part of it)…
        let saved = try String(contentsOf: config.appendingPathComponent("bleota/tuning.json"), encoding: .utf8)
        #expect(saved.contains("sim:\\/\\/linux-bluez"))
        // …and a later flash of the same device starts from it and says so; --no-saved-tuning does not.
        let flash = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://linux-bluez?dle=200&seed=8", "--json"], configHome: config)
        #expect(flash.status == 0, "\(flash.stderr)")
        let flashed = try #require(try JSONSerialization.jsonObject(with: Data(flash.stdout.utf8)) as? [String: Any])
        let packetSize = ((flashed["tuning"] as? [String: Any])?["packetSize"]) as? Int
        #expect(packetSize == (chosen["point"] as? [String: Any])?["packetSize"] as? Int)
        let said = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://linux-bluez?dle=200&seed=8"], configHome: config)
        #expect(said.stderr.contains("using the tuning saved for this device"))
        let ignored = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://linux-bluez?dle=200&seed=8", "--no-saved-tuning"], configHome: config)
        #expect(!ignored.stderr.contains("using the tuning saved"))
        // The heatmap is an SVG with every measured setting and the choice outlined.
        let svg = try String(contentsOf: plot, encoding: .utf8)
        #expect(svg.hasPrefix("<svg"))
        #expect(svg.contains("stroke-width=\"4\""))
        #expect(svg.contains("not tried"))
    }

    /// On the slow device the closed loop reaches the same goodput from either start: the choice is not
    /// saved, and a slower setting saved before is removed, so flash goes back to the default.
    @Test func tuneSavesNothingThatIsNoFasterThanTheDefaultClosedLoopAndRemovesAnEarlierSetting() throws {
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tune-\(UUID())")
        try FileManager.default.createDirectory(at: config.appendingPathComponent("bleota"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: config) }
        let earlier =
            #"{"devices":{"sim://slow-flash":{"goodput":1000,"loss":0,"point":{"delayMilliseconds":20,"packetSize":64,"window":1},"savedAt":"2026-01-01T00:00:00Z","trials":3}}}"#
        try Data(earlier.utf8).write(to: config.appendingPathComponent("bleota/tuning.json"))
        let before = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://slow-flash"], configHome: config)
        #expect(before.stderr.contains("using the tuning saved for this device: packet 64"), "\(before.stderr)")
        let tune = try BleotaProcess.run(["tune", "--device", "sim://slow-flash?seed=3"], configHome: config)
        #expect(tune.status == 0, "\(tune.stderr)")
        #expect(tune.stdout.contains("against flash with no saved setting (the default closed loop's"), "\(tune.stdout)")
        #expect(tune.stdout.contains("so it is not saved"))
        #expect(tune.stdout.contains("removed the setting saved earlier for sim://slow-flash"))
        #expect(tune.stderr.contains("(closed loop from here)"))
        let after = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://slow-flash"], configHome: config)
        #expect(after.status == 0, "\(after.stderr)")
        #expect(!after.stderr.contains("using the tuning saved"))
    }

    /// tune's baseline is flash as it runs with no saved setting. For legacy DFU on the slow device it
    /// measured a window of 32 instead, which flash never runs (4.0 KiB/s against flash's 24.4), and
    /// claimed +379 % for a setting flash then ran at the same 24.4.
    @Test func theBaselineIsFlashWithNoSavedSettingAsTheProtocolChoosesIt() throws {
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tune-\(UUID())")
        try FileManager.default.createDirectory(at: config, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: config) }
        let package = "Tests/BleotaProtocolsTests/Fixtures/nordic/adafruit-nrfutil-0.5.3.post16-app.zip"
        let device = "sim://slow-flash?protocol=nordic-legacy"
        let flash = try BleotaProcess.run(["flash", package, "--device", device, "--json", "--no-saved-tuning"], configHome: config)
        #expect(flash.status == 0, "\(flash.stderr)")
        let flashed = try #require(try JSONSerialization.jsonObject(with: Data(flash.stdout.utf8)) as? [String: Any])
        let flashWindow = try #require((flashed["tuning"] as? [String: Any])?["window"] as? Int)
        let tune = try BleotaProcess.run(["tune", "--device", device, "--image", package, "--json", "--no-saved-tuning"], configHome: config)
        #expect(tune.status == 0, "\(tune.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(tune.stdout.utf8)) as? [String: Any])
        let defaultLoop = try #require(report["defaultClosedLoop"] as? [String: Any])
        let reference = try #require(report["reference"] as? [String: Any])
        // What the baseline ran is what flash ran, not tune's reference point.
        #expect((defaultLoop["point"] as? [String: Any])?["window"] as? Int == flashWindow)
        #expect((reference["point"] as? [String: Any])?["window"] as? Int != flashWindow, "the reference is another setting: the test shows the difference")
        // And no gain is claimed that flash would not see: the choice's closed loop against flash's own.
        let chosenLoop = try #require(report["chosenClosedLoop"] as? [String: Any])
        let gain = (chosenLoop["goodput"] as? Double ?? 0) / (defaultLoop["goodput"] as? Double ?? 1)
        #expect(gain < 1.5, "tune claims \(gain)x over flash's own defaults")
    }

    /// tune takes the protocol from --image as flash does (a Nordic package on plain sim://slow-flash
    /// was refused, "drop --image"), and a setting saved for `sim://slow-flash?protocol=nordic-legacy`
    /// is the one a flash of the same package on `sim://slow-flash` uses: one device, one key
    /// (issue 48, item 17). Legacy DFU has no --delay: the saved knobs it has are taken.
    @Test func aPackageDecidesTuneProtocolAndTheSavedSettingIsFoundUnderEitherAddress() throws {
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tune-\(UUID())")
        try FileManager.default.createDirectory(at: config.appendingPathComponent("bleota"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: config) }
        let package = "Tests/BleotaProtocolsTests/Fixtures/nordic/adafruit-nrfutil-0.5.3.post16-app.zip"
        let tune = try BleotaProcess.run(["tune", "--device", "sim://slow-flash", "--image", package, "--json", "--no-saved-tuning"], configHome: config)
        #expect(tune.status == 0, "\(tune.stderr)")
        #expect(!tune.stderr.contains("drop --image"))
        let saved =
            #"{"devices":{"sim://slow-flash?protocol=nordic-legacy":{"goodput":1000,"loss":0,"point":{"delayMilliseconds":0,"packetSize":100,"window":8},"savedAt":"2026-01-01T00:00:00Z","trials":3}}}"#
        try Data(saved.utf8).write(to: config.appendingPathComponent("bleota/tuning.json"))
        let said = try BleotaProcess.run(["flash", package, "--device", "sim://slow-flash"], configHome: config)
        #expect(said.status == 0, "\(said.stderr)")
        #expect(said.stderr.contains("using the tuning saved for this device: packet 100, window 8"), "\(said.stderr)")
        let flash = try BleotaProcess.run(["flash", package, "--device", "sim://slow-flash", "--json"], configHome: config)
        #expect(flash.status == 0, "\(flash.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(flash.stdout.utf8)) as? [String: Any])
        #expect(report["packetSize"] as? Int == 100, "\(report)")
        // The native protocol on the same preset has its own key: the Nordic setting is not its.
        let native = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://slow-flash"], configHome: config)
        #expect(!native.stderr.contains("using the tuning saved"), "\(native.stderr)")
        #expect(DeviceIdentity("sim://slow-flash?seed=3&protocol=nordic-legacy", protocolName: "nordic-legacy").key == "sim://slow-flash?protocol=nordic-legacy")
        #expect(DeviceIdentity("sim://slow-flash?seed=3", protocolName: "native").key == "sim://slow-flash")
        #expect(DeviceIdentity("ble://AA:BB:CC:DD:EE:FF?adapter=hci1", protocolName: "smp").key == "ble://AA:BB:CC:DD:EE:FF")
    }

    /// On a link without data length extension the native protocol sends compact data headers, and tune
    /// measures packets that full headers could not carry; a flash with that size saved starts and ends.
    @Test func aPacketSizeThatFitsOnlyWithCompactHeadersIsTakenByFlash() throws {
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tune-\(UUID())")
        try FileManager.default.createDirectory(at: config, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: config) }
        let flash = try BleotaProcess.run(
            ["flash", "samples/firmware/blinky.bin", "--device", "sim://1m-no-dle-30ms", "--packet-size", "19", "--json"], configHome: config)
        #expect(flash.status == 0, "\(flash.stderr)")
        #expect(flash.stdout.contains("\"packetSize\" : 19"), "\(flash.stdout)")
        let tooLarge = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://1m-no-dle-30ms", "--packet-size", "20"], configHome: config)
        #expect(tooLarge.status != 0)
        #expect(tooLarge.stderr.contains("packet size 20 is out of range for this link and device: use 1…19"), "\(tooLarge.stderr)")
    }

    /// `--no-saved-tuning` is one idea under one name: flash leaves the saved setting unused, tune leaves it
    /// unwritten. 0.1.0's `tune --no-save` still works for one release, with a warning.
    @Test func noSavedTuningLeavesTheFileAloneUnderEitherName() throws {
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tune-\(UUID())")
        try FileManager.default.createDirectory(at: config, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: config) }
        let saved = config.appendingPathComponent("bleota/tuning.json")
        for flag in ["--no-saved-tuning", "--no-save"] {
            let tune = try BleotaProcess.run(["tune", "--device", "sim://linux-bluez", flag], configHome: config)
            #expect(tune.status == 0, "\(tune.stderr)")
            #expect(!FileManager.default.fileExists(atPath: saved.path), "\(flag) saved nothing")
            #expect(tune.stderr.contains("warning: tune --no-save is now --no-saved-tuning") == (flag == "--no-save"), "\(tune.stderr)")
        }
    }

    /// SMP devices are tuned with a real image (SMPTuneCLITests); without one, tune says what to give.
    @Test func tuneAsksSMPDevicesForAnImageAndRefusesBadOptions() throws {
        let smp = try BleotaProcess.run(["tune", "--device", "sim://2m-dle?protocol=smp"])
        #expect(smp.status == 2)
        #expect(smp.stderr.contains("SMP (MCUmgr) devices take only real images: give the package to measure with, --image FILE"), "\(smp.stderr)")
        let small = try BleotaProcess.run(["tune", "--device", "sim://2m-dle", "--trial-bytes", "10"])
        #expect(small.status == 2)
        #expect(small.stderr.contains("--trial-bytes 10 is out of range"))
    }
}
