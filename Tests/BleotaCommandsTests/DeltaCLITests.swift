import BleotaCodec
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

    /// A plain detools patch names no base: applied to 2.1.0 a patch from 2.0.0 to 2.0.1 wrote a
    /// wrong image, exit 0. Now a note says the base is not checked, and --expect-sha256 (the
    /// newSHA256 that delta create --json printed) refuses the wrong result before writing it.
    @Test func aPlainPatchForAnotherBaseIsRefusedWithTheExpectedHash() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let samples = "samples/cortex-m/gcc-arm-none-eabi-12.2.1"
        let (base, new, other) = ("\(samples)/sensor-hub-2.0.0.bin", "\(samples)/delta/sensor-hub-2.0.1.bin", "\(samples)/delta/sensor-hub-2.1.0.bin")
        let patch = directory.appendingPathComponent("p.patch").path
        let create = try BleotaProcess.run(["delta", "create", base, new, "-o", patch, "--json"])
        #expect(create.status == 0, "\(create.stderr)")
        let created = try #require(try JSONSerialization.jsonObject(with: Data(create.stdout.utf8)) as? [String: Any])
        let newSHA256 = try #require(created["newSHA256"] as? String)
        let wanted = try #require(FileManager.default.contents(atPath: BleotaProcess.repositoryRoot.appendingPathComponent(new).path))

        // Unchecked, the wrong base still rebuilds some image (as detools does), and one line says
        // what could not be checked.
        let unchecked = directory.appendingPathComponent("unchecked.bin").path
        let plain = try BleotaProcess.run(["delta", "apply", other, patch, "-o", unchecked])
        #expect(plain.status == 0, "\(plain.stderr)")
        #expect(
            plain.stderr
                == "note: \(patch) is a plain detools patch, which does not name its base, so bleota cannot check that \(other) is it: give --expect-sha256 the new image's SHA-256 to check the result\n"
        )
        let rebuilt = try #require(FileManager.default.contents(atPath: unchecked))
        #expect(rebuilt != wanted && rebuilt.count == wanted.count)

        // The wrong base, checked: exit 5, one line naming both hashes and the fix; no file created,
        // and one already there left as it was.
        let out = directory.appendingPathComponent("out.bin").path
        let wrong = try BleotaProcess.run(["delta", "apply", other, patch, "-o", out, "--expect-sha256", newSHA256])
        #expect(wrong.status == 5, "\(wrong.stderr)")
        let lines = wrong.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(wrong.stderr)")
        #expect(lines.first?.hasPrefix("error: \(other) and \(patch) make an image with SHA-256 \(SHA256Digest.hash(Array(rebuilt)).hexString), ") == true, "\(wrong.stderr)")
        #expect(
            lines.first?.hasSuffix(", not the \(newSHA256) of --expect-sha256: give the image the patch was made from as OLD; nothing was written") == true,
            "\(wrong.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
        try Data("kept".utf8).write(to: URL(fileURLWithPath: out))
        let again = try BleotaProcess.run(["delta", "apply", other, patch, "-o", out, "--expect-sha256", newSHA256, "--json"])
        #expect(again.status == 5)
        let failure = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
        #expect(failure["exitStatus"] as? Int == 5)
        #expect(FileManager.default.contents(atPath: out) == Data("kept".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["out.bin", "p.patch", "unchecked.bin"])

        // The right base, checked (the digits in either case): written, and nothing to note.
        let right = try BleotaProcess.run(["delta", "apply", base, patch, "-o", out, "--expect-sha256", newSHA256.uppercased()])
        #expect(right.status == 0 && right.stderr.isEmpty, "\(right.stderr)")
        #expect(FileManager.default.contents(atPath: out) == wanted)

        // Not a SHA-256: a usage error before anything is read.
        let typo = try BleotaProcess.run(["delta", "apply", base, patch, "-o", out, "--expect-sha256", String(newSHA256.dropLast())])
        #expect(typo.status == 2)
        #expect(typo.stderr.hasPrefix("error: --expect-sha256 '\(newSHA256.dropLast())' is not a SHA-256: give its 64 hex digits (delta create --json prints it as newSHA256)\n"))
    }

    /// With esp_delta_ota's header the base is checked from the patch, as before: no note.
    @Test func aPatchWithTheESPHeaderNeedsNoNote() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let patch = directory.appendingPathComponent("p.patch").path
        let out = directory.appendingPathComponent("out.bin").path
        #expect(try BleotaProcess.run(["delta", "create", "samples/firmware/blinky.bin", "samples/firmware/app-v2.bin", "-o", patch, "--esp-header"]).status == 0)
        let apply = try BleotaProcess.run(["delta", "apply", "samples/firmware/blinky.bin", patch, "-o", out])
        #expect(apply.status == 0 && apply.stderr.isEmpty, "\(apply.stderr)")
        #expect(FileManager.default.contents(atPath: out) == FileManager.default.contents(atPath: "samples/firmware/app-v2.bin"))
    }

    /// An error's offset is a byte of the patch file: half a 49 152-byte image's heatshrink patch
    /// ended "at byte" an offset of its decompressed data, past the file's end.
    @Test func aTruncatedPatchIsNamedAtItsEnd() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let patch = directory.appendingPathComponent("p.patch")
        #expect(try BleotaProcess.run(["delta", "create", "samples/firmware/blinky.bin", "samples/firmware/app-v2.bin", "-o", patch.path]).status == 0)
        let bytes = try Data(contentsOf: patch)
        let truncated = directory.appendingPathComponent("t.patch")
        try bytes.prefix(bytes.count / 2).write(to: truncated)
        let cut = try BleotaProcess.run(["delta", "apply", "samples/firmware/blinky.bin", truncated.path, "-o", directory.appendingPathComponent("out.bin").path])
        #expect(cut.status == 3)
        // After the note that the base is not checked, the error.
        let error = try #require(cut.stderr.split(separator: "\n").last.map(String.init))
        #expect(error.hasPrefix("error: \(truncated.path): the patch ends inside its "), "\(cut.stderr)")
        #expect(error.contains(", at byte \(bytes.count / 2) (byte "), "\(cut.stderr)")
        #expect(error.hasSuffix(" of its decompressed data): it is truncated; nothing was written"), "\(cut.stderr)")
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
