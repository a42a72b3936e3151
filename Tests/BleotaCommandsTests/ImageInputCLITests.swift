import BleotaCodec
import Crypto
import Foundation
import Testing

@testable import BleotaCommands

/// The `bleota` executable run with a deadline (a hang fails the test instead
/// of stalling the suite) and its peak memory measured.
///
/// The peak comes from a small Python parent that runs bleota and reads
/// `RUSAGE_CHILDREN`: a child spawned straight from this test process would
/// report this process's own peak, because Linux records the old address
/// space's peak at `exec` and `posix_spawn` execs from a copy of the parent's.
struct GuardedRun {
    var status: Int32
    var stdout: String
    var stderr: String
    /// bleota's peak resident set, in bytes.
    var peakResident: Int
    /// True when the deadline passed and the process group was killed.
    var killed: Bool

    static let measure = """
        import os, resource, subprocess, sys
        peak_file, root, *command = sys.argv[1:]
        os.chdir(root)
        status = subprocess.call(command)
        with open(peak_file, "w") as f:
            f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
        sys.exit(status if status >= 0 else 128 - status)
        """

    static func run(_ arguments: [String], deadline seconds: Double = 60) throws -> GuardedRun {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let outPath = directory.appendingPathComponent("out").path
        let errPath = directory.appendingPathComponent("err").path
        let peakPath = directory.appendingPathComponent("peak").path
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // Its own process group, so the deadline kills bleota along with Python.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        posix_spawnattr_setpgroup(&attributes, 0)
        let command = ["/usr/bin/env", "python3", "-c", measure, peakPath, BleotaProcess.repositoryRoot.path, BleotaProcess.executable.path] + arguments
        let argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_CONFIG_HOME"] = BleotaProcess.configHome.path
        environment["XDG_DATA_HOME"] = BleotaProcess.configHome.appendingPathComponent("data-measured").path
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, command[0], &actions, &attributes, argv, envp) == 0 else { throw CocoaError(.executableLoad) }

        var status: Int32 = 0
        var killed = false
        let start = Date()
        while waitpid(pid, &status, WNOHANG) != pid {
            if Date().timeIntervalSince(start) > seconds, !killed {
                kill(-pid, SIGKILL)
                killed = true
            }
            // Real time: a real bleota process is what is waited for.
            usleep(20_000)
        }
        let exited = status & 0x7F == 0
        let peak = (try? String(contentsOfFile: peakPath, encoding: .utf8)).flatMap { Int($0) } ?? 0
        return GuardedRun(
            status: exited ? (status >> 8) & 0xFF : 128 + (status & 0x7F),
            stdout: (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "",
            peakResident: peak * 1024, killed: killed)
    }
}

func scratchDirectory() throws -> String {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-cli-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory.path
}

/// Input files that are not regular files are refused, with what they are, exit status 3, and no hang.
@Suite struct NonRegularInputTests {
    static func commands(_ path: String) -> [[String]] {
        [
            ["image", "info", path],
            ["image", "info", path, "--input-format", "bin"],
            ["image", "convert", path, "/tmp/bleota-never-written.hex"],
            ["flash", path, "--device", "sim://2m-dle"],
            ["flash", path, "--device", "sim://2m-dle?protocol=smp"],
            ["push", path, "--device", "sim://2m-dle"],
        ]
    }

    @Test func aFIFOIsRefusedByEveryCommand() throws {
        let fifo = try scratchDirectory() + "/pipe.hex"
        #expect(mkfifo(fifo, 0o600) == 0)
        for arguments in Self.commands(fifo) {
            let result = try GuardedRun.run(arguments, deadline: 30)
            #expect(!result.killed, "\(arguments) hung on a FIFO")
            #expect(result.status == 3, "\(arguments): \(result.stderr)")
            #expect(result.stderr == "error: \(fifo) is a FIFO (named pipe): give a regular file\n", "\(arguments)")
        }
        #expect(!FileManager.default.fileExists(atPath: "/tmp/bleota-never-written.hex"))
    }

    @Test(arguments: ["/dev/null", "/dev/zero"])
    func characterDevicesAreRefusedByEveryCommand(device: String) throws {
        for arguments in Self.commands(device) + [["image", "info", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--key", device]] {
            let result = try GuardedRun.run(arguments, deadline: 30)
            #expect(!result.killed, "\(arguments) hung on \(device)")
            #expect(result.status == 3, "\(arguments): \(result.stderr)")
            #expect(result.stderr == "error: \(device) is a character device: give a regular file\n", "\(arguments)")
        }
    }

    @Test func aDirectoryIsRefusedLikeAnyOtherNonRegularFile() throws {
        let directory = try scratchDirectory()
        let result = try GuardedRun.run(["push", directory, "--device", "sim://2m-dle"])
        #expect(result.status == 3)
        #expect(result.stderr == "error: \(directory) is a directory: give a regular file\n")
    }
}

/// Sparse images through the CLI: measured and converted without materialising gaps.
@Suite struct SparseImageCLITests {
    static func hexRecord(_ type: UInt8, _ address: UInt16, _ data: [UInt8]) -> String {
        let body = [UInt8(data.count), UInt8(address >> 8), UInt8(address & 0xFF), type] + data
        let checksum = UInt8((256 - body.reduce(0) { $0 + Int($1) } % 256) % 256)
        return ":" + (body + [checksum]).map { String(format: "%02X", $0) }.joined() + "\n"
    }

    @Test func infoOnAHexSpanning1GiBStaysSmall() throws {
        // Four bytes at 0 and four ending at 1 GiB: the gap is never allocated.
        let text =
            Self.hexRecord(0x00, 0, [1, 2, 3, 4]) + Self.hexRecord(0x04, 0, [0x3F, 0xFF])
            + Self.hexRecord(0x00, 0xFFFC, [5, 6, 7, 8]) + Self.hexRecord(0x01, 0, [])
        let path = try scratchDirectory() + "/span.hex"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let result = try GuardedRun.run(["image", "info", path, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(result.stdout.utf8))
        #expect(report.size == 1 << 30)
        #expect(report.segments == [.init(address: 0, length: 4), .init(address: 0x3FFF_FFFC, length: 4)])
        // The library's streaming checksums are checked against independent arithmetic in
        // BleotaCodecTests; here the CLI must report the same, from a tenth of the memory.
        let image = try IntelHex.parse(Array(text.utf8))
        let checksums = image.checksums()
        #expect(report.crc32 == String(format: "0x%08x", checksums.crc32))
        #expect(report.sha256 == checksums.sha256.map { String(format: "%02x", $0) }.joined())
        #expect(result.peakResident < 100 << 20, "image info peaked at \(result.peakResident >> 20) MiB")
    }

    /// 132 bytes of Intel HEX: 20 bytes at 0 and 20 at 0xFFFF_FF00. `flash` peaked at 4.2 GB
    /// filling the gap in before it refused for size, and `image convert` to .bin began writing 4 GiB.
    static let farApart =
        hexRecord(0x00, 0, Array(0..<20)) + hexRecord(0x04, 0, [0xFF, 0xFF]) + hexRecord(0x00, 0xFF00, Array(20..<40)) + hexRecord(0x01, 0, [])
    static let farApartRefusal =
        "sparse.hex: its segments span 0x00000000–0xFFFFFF13, 4294967060 bytes, more than the limit of 268435456 bytes: leave out what the target does not hold (the last segment starts at 0xFFFFFF00), or give --max-span 4294967060"

    @Test func flashAndConvertRefuseAHexSpanning4GiBFromItsSegments() throws {
        #expect(Self.farApart.utf8.count == 132)
        let directory = try scratchDirectory()
        let path = directory + "/sparse.hex"
        try Self.farApart.write(toFile: path, atomically: true, encoding: .utf8)
        let output = directory + "/out.bin"
        for arguments in [
            ["flash", path, "--device", "sim://2m-dle", "--no-saved-tuning"],
            ["flash", path, "--device", "sim://2m-dle", "--protocol-file", "protocols/stm32wb-ota.yaml", "--no-saved-tuning"],
            ["image", "convert", path, output],
        ] {
            let result = try GuardedRun.run(arguments, deadline: 60)
            #expect(!result.killed && result.status == 3, "\(arguments): \(result.stderr)")
            #expect(result.stderr == "error: \(Self.farApartRefusal)\n", "\(arguments)")
            #expect(result.peakResident < 64 << 20, "\(arguments) peaked at \(result.peakResident >> 20) MiB")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["sparse.hex"])
        // To HEX it stays two records: nothing between them is written, so nothing is refused.
        let hex = try GuardedRun.run(["image", "convert", path, directory + "/copy.hex"])
        #expect(hex.status == 0, "\(hex.stderr)")
        #expect(try FirmwareImage.load(path: directory + "/copy.hex").segments == (try IntelHex.parse(Array(Self.farApart.utf8))).segments)
    }

    /// An STM32 HEX with its option bytes (0x1FFF_7800) beside its flash (0x0800_0000) spans
    /// 400 MB: not hostile, but no .bin to write; --max-span says how far to go.
    @Test func anSTM32HexWithOptionBytesIsRefusedForABinWithTheFix() throws {
        let directory = try scratchDirectory()
        let path = directory + "/stm32.hex"
        let text =
            Self.hexRecord(0x04, 0, [0x08, 0x00]) + Self.hexRecord(0x00, 0, Array(repeating: 0xA5, count: 16))
            + Self.hexRecord(0x04, 0, [0x1F, 0xFF]) + Self.hexRecord(0x00, 0x7800, [0xAA, 0xF8, 0xFF, 0xFB, 0xFF, 0xFF, 0xFF, 0xFF])
            + Self.hexRecord(0x01, 0, [])
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let refusal =
            "error: stm32.hex: its segments span 0x08000000–0x1FFF7807, 402618376 bytes, more than the limit of 268435456 bytes: leave out what the target does not hold (the last segment starts at 0x1FFF7800), or give --max-span 402618376"
        let convert = try GuardedRun.run(["image", "convert", path, directory + "/stm32.bin"])
        #expect(convert.status == 3)
        #expect(convert.stderr == refusal + "\n")
        let flash = try GuardedRun.run(["flash", path, "--device", "sim://2m-dle", "--no-saved-tuning"])
        #expect(flash.status == 3)
        #expect(flash.stderr == refusal + "\n")
        #expect(max(convert.peakResident, flash.peakResident) < 64 << 20)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["stm32.hex"])
    }

    /// --max-span moves the limit either way; a size takes a unit.
    @Test func maxSpanSetsTheLimit() throws {
        let directory = try scratchDirectory()
        let path = directory + "/two.hex"
        // 2 MiB and 16 bytes from the first byte to the last.
        let text =
            Self.hexRecord(0x00, 0, Array(repeating: 1, count: 16)) + Self.hexRecord(0x04, 0, [0x00, 0x20])
            + Self.hexRecord(0x00, 0, Array(repeating: 2, count: 16)) + Self.hexRecord(0x01, 0, [])
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let out = directory + "/two.bin"
        let refused = try BleotaProcess.run(["image", "convert", path, out, "--max-span", "1MiB"])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("2097168 bytes, more than the limit of 1048576 bytes"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
        let written = try BleotaProcess.run(["image", "convert", path, out, "--max-span", "2097168"])
        #expect(written.status == 0, "\(written.stderr)")
        #expect((try FileManager.default.attributesOfItem(atPath: out)[.size] as? Int) == 2_097_168)
        // A raw input by its size, before it is read.
        let raw = directory + "/raw.bin"
        #expect(FileManager.default.createFile(atPath: raw, contents: nil) && truncate(raw, 3 << 20) == 0)
        let rawRefused = try BleotaProcess.run(["image", "convert", raw, directory + "/raw-copy.bin", "--max-span", "2MiB", "--base-address", "0x8000"])
        #expect(rawRefused.status == 3)
        #expect(
            rawRefused.stderr
                == "error: raw.bin: its segments span 0x00008000–0x00307FFF, 3145728 bytes, more than the limit of 2097152 bytes: leave out what the target does not hold, or give --max-span 3145728\n"
        )
        let flash = try BleotaProcess.run(["flash", path, "--device", "sim://2m-dle", "--no-saved-tuning", "--max-span", "2MiB"])
        #expect(flash.status == 3 && flash.stderr.contains("more than the limit of 2097152 bytes"), "\(flash.stderr)")
        let typo = try BleotaProcess.run(["image", "convert", path, out, "--max-span", "2MB"])
        #expect(typo.status == 2)
        #expect(
            typo.stderr.hasPrefix("error: the value '2MB' is invalid for '--max-span <SIZE>': write bytes, or a number with KiB, MiB or GiB (256MiB), from 1 byte to 4GiB\n"),
            "\(typo.stderr)")
    }

    @Test func convertingToTextStreamsTheRecords() throws {
        // 8 MiB to Intel HEX (23 MiB of text) and S-records: memory stays near the image,
        // not the text (building the text whole peaked near seven times the image).
        let directory = try scratchDirectory()
        let input = directory + "/app.bin"
        // A fixed pattern (Knuth's multiplicative hash), not random: any bytes will do.
        let bytes = (0..<(8 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) }
        try Data(bytes).write(to: URL(fileURLWithPath: input))
        for output in [directory + "/app.hex", directory + "/app.srec"] {
            let result = try GuardedRun.run(["image", "convert", input, output], deadline: 300)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.peakResident < (8 << 20) + (40 << 20), "convert peaked at \(result.peakResident >> 20) MiB")
            let back = try FirmwareImage.load(path: output)
            #expect(back.flattened() == bytes)
        }
    }
}

/// What `image convert` writes about the start address, and that bleota reads back what it writes.
@Suite struct ConvertStartRecordCLITests {
    @Test func aStartAddressIsKeptThroughSRecordsAndBack() throws {
        let directory = try scratchDirectory()
        let srec = directory + "/blinky.srec"
        let hex = directory + "/blinky.hex"
        #expect(try BleotaProcess.run(["image", "convert", "samples/firmware/blinky.hex", srec]).status == 0)
        let srecLines = try String(contentsOfFile: srec, encoding: .utf8).split(separator: "\n")
        // blinky ends below 64 KiB, so 16-bit records and S9, carrying 0x8101.
        let termination: String = "S9038101" + String(format: "%02X", 255 - (3 + 0x81 + 0x01))
        #expect(srecLines.last.map(String.init) == termination)
        #expect(try BleotaProcess.run(["image", "convert", srec, hex]).status == 0)
        let info = try BleotaProcess.run(["image", "info", hex, "--json"])
        let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(info.stdout.utf8))
        #expect(report.startAddress == 0x8101)
        #expect(try String(contentsOfFile: hex, encoding: .utf8).contains(":0400000500008101"))
    }

    @Test func noStartAddressMeansNoStartRecord() throws {
        let directory = try scratchDirectory()
        let srec = directory + "/app.srec"
        let hex = directory + "/app.hex"
        #expect(try BleotaProcess.run(["image", "convert", "samples/firmware/app-v2.bin", srec, "--base-address", "0x20000"]).status == 0)
        let srecText = try String(contentsOfFile: srec, encoding: .utf8)
        #expect(!srecText.split(separator: "\n").contains { $0.hasPrefix("S7") || $0.hasPrefix("S8") || $0.hasPrefix("S9") })
        #expect(srecText.split(separator: "\n").last?.hasPrefix("S5") == true)
        // bleota reads back what it wrote, termination record or not.
        let converted = try BleotaProcess.run(["image", "convert", srec, hex])
        #expect(converted.status == 0, "\(converted.stderr)")
        let hexText = try String(contentsOfFile: hex, encoding: .utf8)
        #expect(!hexText.split(separator: "\n").contains { $0.count >= 9 && ["03", "05"].contains($0.dropFirst(7).prefix(2)) })
        let info = try BleotaProcess.run(["image", "info", hex, "--json"])
        let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(info.stdout.utf8))
        #expect(report.startAddress == nil)
        #expect(report.baseAddress == 0x20000)
        #expect(report.crc32 == "0x5309b2db")
    }
}

/// Parser errors through the CLI quote input bytes escaped.
@Suite struct QuotedInputCLITests {
    @Test func errorMessagesQuoteControlBytesEscaped() throws {
        let path = try scratchDirectory() + "/bad.hex"
        try Data(Array(":01000000\u{1B}[31m\n:00000001FF\n".utf8)).write(to: URL(fileURLWithPath: path))
        let result = try BleotaProcess.run(["image", "info", path])
        #expect(result.status == 3)
        #expect(result.stderr == "error: bad.hex: line 1: '\\x1B' at column 10 is not a hex digit\n")
    }

    @Test func anSRecordHeaderIsShownWithControlCharactersEscaped() throws {
        let header: [UInt8] = [0x1B] + Array("[2Jhi".utf8)
        let body = [UInt8(header.count + 3), 0, 0] + header
        let checksum = UInt8(255 - body.reduce(0) { $0 + Int($1) } % 256)
        let s0 = "S0" + (body + [checksum]).map { String(format: "%02X", $0) }.joined()
        let path = try scratchDirectory() + "/h.srec"
        try (s0 + "\nS10500001122C7\nS9030000FC\n").write(toFile: path, atomically: true, encoding: .utf8)
        let result = try BleotaProcess.run(["image", "info", path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("header:    \\x1B[2Jhi\n"))
        #expect(!result.stdout.contains("\u{1B}"))
    }
}

/// `image info --key` with a private key, as imgtool accepts one.
@Suite struct PrivateKeyCLITests {
    /// An MCUboot image signed with `key` the way imgtool signs with ECDSA P-256.
    static func signedImage(_ firmware: [UInt8], key: P256.Signing.PrivateKey) throws -> [UInt8] {
        let unsigned = MCUbootImage.build(firmware: firmware, version: .init(major: 3, minor: 1, revision: 4, build: 0))
        let hashed = Array(unsigned.dropLast(40))
        let hash = Array(SHA256.hash(data: hashed))
        let keyHash = Array(SHA256.hash(data: key.publicKey.derRepresentation))
        let signature = Array(try key.signature(for: hashed).derRepresentation)
        var entries: [UInt8] = []
        for (type, value) in [(UInt8(0x10), hash), (0x01, keyHash), (0x22, signature)] {
            entries += [type, 0, UInt8(value.count), 0] + value
        }
        return hashed + [0x07, 0x69, UInt8((entries.count + 4) & 0xFF), UInt8((entries.count + 4) >> 8)] + entries
    }

    static func opensslKey(_ suffix: String) throws -> String {
        let directory = BleotaProcess.repositoryRoot.appendingPathComponent("samples/keys")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        let name = try #require(names.sorted().first { $0.hasPrefix("openssl-") && $0.hasSuffix(suffix) })
        return "samples/keys/" + name
    }

    @Test(arguments: ["-ec-p256-private.pem", "-ec-p256-private-sec1.pem", "-ec-p256-public.pem"])
    func anImageSignedWithOpensslsKeyVerifiesWithItsPrivateOrPublicKey(keyFile suffix: String) throws {
        let keyPath = try Self.opensslKey(suffix)
        let signingPEM = try String(
            contentsOfFile: BleotaProcess.repositoryRoot.appendingPathComponent(try Self.opensslKey("-ec-p256-private.pem")).path,
            encoding: .utf8)
        let key = try P256.Signing.PrivateKey(pemRepresentation: signingPEM)
        let image = try scratchDirectory() + "/signed.bin"
        try Data(try Self.signedImage((0..<5000).map { UInt8(truncatingIfNeeded: $0) }, key: key)).write(to: URL(fileURLWithPath: image))
        let result = try BleotaProcess.run(["image", "info", image, "--key", keyPath])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("signature: ECDSA P-256 (verified with the given key)"))
        let json = try BleotaProcess.run(["image", "info", image, "--key", keyPath, "--json"])
        let report = try JSONDecoder().decode(ImageInfoDocument.self, from: Data(json.stdout.utf8))
        #expect(report.mcuboot?.signatureVerified == true)
        #expect(report.mcuboot?.keyHash == Array(SHA256.hash(data: key.publicKey.derRepresentation)).map { String(format: "%02x", $0) }.joined())
    }

    @Test func anotherPrivateKeyDoesNotVerify() throws {
        let directory = try scratchDirectory()
        let image = directory + "/signed.bin"
        try Data(try Self.signedImage([1, 2, 3], key: P256.Signing.PrivateKey())).write(to: URL(fileURLWithPath: image))
        let other = directory + "/other.pem"
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: other, atomically: true, encoding: .utf8)
        let result = try BleotaProcess.run(["image", "info", image, "--key", other])
        #expect(result.status == 5)
        #expect(result.stderr.hasSuffix("the image was signed with a different key (its key hash TLV does not match --key)\n"))
    }
}
