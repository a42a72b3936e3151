import Foundation
import Testing

/// `bleota delta` from the real binary: files written whole or not at all, one-line errors with
/// their documented exit statuses, JSON that says what was made.
@Suite struct DeltaCLITests {
    static func directory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-delta-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    @Test func createInfoApplyRoundTripsTheSampleImages() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let patch = directory.appendingPathComponent("p.patch").path
        let rebuilt = directory.appendingPathComponent("new.bin").path
        let create = try BleotaProcess.run(["delta", "create", "samples/firmware/blinky.bin", "samples/firmware/app-v2.bin", "-o", patch, "--json"])
        #expect(create.status == 0, "\(create.stderr)")
        let created = try #require(try JSONSerialization.jsonObject(with: Data(create.stdout.utf8)) as? [String: Any])
        #expect(created["compression"] as? String == "heatshrink" && created["newSize"] as? Int == 49152)
        #expect(created["patchSize"] as? Int == (try FileManager.default.attributesOfItem(atPath: patch)[.size] as? Int))
        let info = try BleotaProcess.run(["delta", "info", patch])
        #expect(
            info.status == 0 && info.stdout.contains("compression: heatshrink (window 2^8, lookahead 2^7)") && info.stdout.contains("new image:   49152 bytes"), "\(info.stdout)")
        let apply = try BleotaProcess.run(["delta", "apply", "samples/firmware/blinky.bin", patch, "-o", rebuilt])
        #expect(apply.status == 0, "\(apply.stderr)")
        #expect(FileManager.default.contents(atPath: rebuilt) == FileManager.default.contents(atPath: "samples/firmware/app-v2.bin"))
    }

    @Test func aDamagedPatchOrAnotherBaseWritesNothing() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let patch = directory.appendingPathComponent("p.patch")
        let out = directory.appendingPathComponent("out.bin").path
        let create = try BleotaProcess.run(["delta", "create", "samples/firmware/blinky.bin", "samples/firmware/app-v2.bin", "-o", patch.path, "--esp-header"])
        #expect(create.status == 0, "\(create.stderr)")
        // Another base than the header names: exit 5, nothing written.
        let wrongBase = try BleotaProcess.run(["delta", "apply", "samples/firmware/app-v2.bin", patch.path, "-o", out])
        #expect(wrongBase.status == 5)
        #expect(wrongBase.stderr.hasPrefix("error: \(patch.path) was made for a base with SHA-256 ") && wrongBase.stderr.contains("nothing was written"), "\(wrongBase.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
        // Truncated: exit 3, the field and byte named, nothing written.
        let bytes = try Data(contentsOf: patch)
        let truncated = directory.appendingPathComponent("t.patch")
        try bytes.prefix(bytes.count / 2).write(to: truncated)
        let cut = try BleotaProcess.run(["delta", "apply", "samples/firmware/blinky.bin", truncated.path, "-o", out])
        #expect(cut.status == 3)
        #expect(cut.stderr.contains("it is truncated; nothing was written") && cut.stderr.split(separator: "\n").count == 1, "\(cut.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
        // Not a patch at all.
        let notPatch = try BleotaProcess.run(["delta", "info", "samples/firmware/blinky.hex", "--json"])
        #expect(notPatch.status == 3)
        let failure = try #require(try JSONSerialization.jsonObject(with: Data(notPatch.stdout.utf8)) as? [String: Any])
        #expect(failure["exitStatus"] as? Int == 3 && (failure["error"] as? String ?? "").hasPrefix("samples/firmware/blinky.hex: the patch"))
    }

    @Test(
        arguments: [
            (
                ["delta", "create", "samples/firmware/blinky.bin", "samples/firmware/app-v2.bin", "-o", "/nonexistent-dir/p.patch"], Int32(3),
                "the directory /nonexistent-dir does not exist"
            ),
            (["delta", "create", "samples/firmware/blinky.bin", "samples/firmware/nope.bin", "-o", "/tmp/x.patch"], 3, "samples/firmware/nope.bin: no such file"),
            (["delta", "create", "samples/firmware/blinky.bin", "samples/firmware/app-v2.bin", "-o", "/tmp/x.patch", "--compression", "lzma"], 2, "lzma"),
            (["delta", "apply", "samples/firmware/blinky.bin"], 2, "missing expected argument"),
        ] as [([String], Int32, String)])
    func badArgumentsAreOneLine(arguments: [String], status: Int32, message: String) throws {
        let run = try BleotaProcess.run(arguments)
        #expect(run.status == status, "\(run.stderr)")
        #expect(run.stderr.lowercased().contains(message.lowercased()), "\(run.stderr)")
        #expect(run.stderr.split(separator: "\n").filter { $0.hasPrefix("error:") }.count == 1)
    }
}
