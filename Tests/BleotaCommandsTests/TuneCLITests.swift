import Foundation
import Testing

@testable import BleotaCommands

@Suite struct TuneCLITests {
    @Test func tuneOnTheSlowDevicePicksACleanSettingThatBeatsTheDefaultAndFlashUsesIt() throws {
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-tune-\(UUID())")
        let plot = config.appendingPathComponent("tune.svg")
        try FileManager.default.createDirectory(at: config, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: config) }
        let tune = try BleotaProcess.run(["tune", "--device", "sim://slow-flash?seed=3", "--json", "--plot", plot.path], configHome: config)
        #expect(tune.status == 0, "\(tune.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(tune.stdout.utf8)) as? [String: Any])
        let chosen = try #require(report["chosen"] as? [String: Any])
        let reference = try #require(report["reference"] as? [String: Any])
        let trials = try #require(report["trials"] as? [[String: Any]])
        #expect((chosen["loss"] as? Double ?? 1) < 0.01, "the choice loses under 1 %")
        #expect((chosen["goodput"] as? Double ?? 0) > (reference["goodput"] as? Double ?? .infinity), "and beats the default")
        #expect(trials.count * 4 <= (report["gridSize"] as? Int ?? 0), "in at most a quarter of the grid's trials")
        // Saved under the device's identity (the seed is not part of it)…
        let saved = try String(contentsOf: config.appendingPathComponent("bleota/tuning.json"), encoding: .utf8)
        #expect(saved.contains("sim:\\/\\/slow-flash"))
        // …and a later flash of the same device uses it and says so; --no-saved-tuning does not.
        let flash = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://slow-flash?seed=8", "--json"], configHome: config)
        #expect(flash.status == 0, "\(flash.stderr)")
        let flashed = try #require(try JSONSerialization.jsonObject(with: Data(flash.stdout.utf8)) as? [String: Any])
        let window = ((flashed["tuning"] as? [String: Any])?["window"]) as? Int
        #expect(window == (chosen["point"] as? [String: Any])?["window"] as? Int)
        let said = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://slow-flash?seed=8"], configHome: config)
        #expect(said.stderr.contains("using the tuning saved for this device"))
        let ignored = try BleotaProcess.run(["flash", "samples/firmware/blinky.bin", "--device", "sim://slow-flash?seed=8", "--no-saved-tuning"], configHome: config)
        #expect(!ignored.stderr.contains("using the tuning saved"))
        // The heatmap is an SVG with every measured setting and the choice outlined.
        let svg = try String(contentsOf: plot, encoding: .utf8)
        #expect(svg.hasPrefix("<svg"))
        #expect(svg.contains("stroke-width=\"4\""))
        #expect(svg.contains("not tried"))
    }

    @Test func tuneRefusesSMPDevicesAndBadOptions() throws {
        let smp = try BleotaProcess.run(["tune", "--device", "sim://2m-dle?protocol=smp"])
        #expect(smp.status == 2)
        #expect(smp.stderr.contains("speaks SMP"))
        let small = try BleotaProcess.run(["tune", "--device", "sim://2m-dle", "--trial-bytes", "10"])
        #expect(small.status == 2)
        #expect(small.stderr.contains("--trial-bytes 10 is out of range"))
    }
}
