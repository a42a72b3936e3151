import Foundation
import Testing

@testable import BleotaCodec

/// Only regular files are read; anything else is refused with what it is,
/// before it is opened, and never by blocking.
@Suite struct InputFileTests {
    static func temporaryDirectory() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-input-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.path
    }

    /// Runs `body` on a FIFO with a guard: if `body` blocks on it (opening a FIFO
    /// for reading waits for a writer; reading waits for data), a writer opens
    /// and closes it every `seconds`, so the test ends — and fails on what it got —
    /// instead of hanging the suite.
    static func withGuardedFIFO<T>(named name: String, seconds: Double = 10, _ body: (String) throws -> T) throws -> T {
        let path = try temporaryDirectory() + "/" + name
        #expect(mkfifo(path, 0o600) == 0)
        let done = DispatchSemaphore(value: 0)
        let watchdog = Thread {
            while done.wait(timeout: .now() + seconds) == .timedOut {
                // A reader blocked in open or read is released by a writer coming and going.
                let writer = open(path, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
            }
        }
        watchdog.start()
        defer { done.signal() }
        return try body(path)
    }

    @Test func aFIFOIsRefusedWithoutBlocking() throws {
        let error = try Self.withGuardedFIFO(named: "pipe.bin") { path in
            #expect(throws: InputFileError(path: path, kind: .notRegularFile(.fifo))) { try InputFile.read(path) }
            #expect(throws: InputFileError(path: path, kind: .notRegularFile(.fifo))) { try InputFile.prefix(path, count: 4) }
            return #expect(throws: ImageError.self) { try FirmwareImage.load(path: path) }
        }
        guard case .inputFile(let inner)? = error?.kind else {
            Issue.record("not an input file error: \(String(describing: error))")
            return
        }
        #expect(inner.kind == .notRegularFile(.fifo))
        #expect(error?.description == "\(inner.path) is a FIFO (named pipe): give a regular file")
    }

    @Test(arguments: ["/dev/null", "/dev/zero"])
    func characterDevicesAreRefused(path: String) throws {
        #expect(throws: InputFileError(path: path, kind: .notRegularFile(.characterDevice))) { try InputFile.read(path) }
        let error = #expect(throws: ImageError.self) { try FirmwareImage.load(path: path, format: .bin) }
        #expect(error?.description == "\(path) is a character device: give a regular file")
        // Without a format the device is still named for what it is, not for its missing extension.
        #expect(
            throws: ImageError(
                file: (path as NSString).lastPathComponent,
                kind: .inputFile(InputFileError(path: path, kind: .notRegularFile(.characterDevice))))
        ) {
            try FirmwareImage.load(path: path)
        }
    }

    @Test func aSocketIsRefused() throws {
        let path = try Self.temporaryDirectory() + "/s.sock"
        let socket = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        #expect(socket >= 0)
        defer { close(socket) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in path.utf8.enumerated() where index < buffer.count - 1 { buffer[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        let error = #expect(throws: InputFileError.self) { try InputFile.read(path) }
        #expect(error?.description == "\(path) is a socket: give a regular file")
    }

    @Test func aBlockDeviceIsRefused() throws {
        // Whatever block device this machine has, if any (containers often have none).
        let devices = (try? FileManager.default.contentsOfDirectory(atPath: "/dev")) ?? []
        guard
            let device = devices.sorted().map({ "/dev/" + $0 }).first(where: { path in
                var info = stat()
                return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFBLK
            })
        else { return }
        #expect(throws: InputFileError(path: device, kind: .notRegularFile(.blockDevice))) { try InputFile.read(device) }
        #expect(InputFileError(path: device, kind: .notRegularFile(.blockDevice)).description == "\(device) is a block device: give a regular file")
    }

    @Test func directoriesMissingFilesAndPrefixes() throws {
        let directory = try Self.temporaryDirectory()
        #expect(throws: InputFileError(path: directory, kind: .notRegularFile(.directory))) { try InputFile.read(directory) }
        #expect(InputFileError(path: "d", kind: .notRegularFile(.directory)).description == "d is a directory: give a regular file")
        let missing = directory + "/none.bin"
        #expect(throws: InputFileError(path: missing, kind: .notFound)) { try InputFile.read(missing) }
        #expect(throws: InputFileError(path: missing + "/below", kind: .notFound)) { try InputFile.read(missing + "/below") }
        let file = try temporaryFile("five.bin", [1, 2, 3, 4, 5])
        #expect(try InputFile.read(file) == [1, 2, 3, 4, 5])
        #expect(try InputFile.prefix(file, count: 4) == [1, 2, 3, 4])
        #expect(try InputFile.prefix(file, count: 40) == [1, 2, 3, 4, 5])
        #expect(try InputFile.read(try temporaryFile("empty.bin", [])) == [])
        // A symbolic link to a regular file is read through; a dangling one is missing.
        let link = directory + "/link.bin"
        #expect(symlink(file, link) == 0)
        #expect(try InputFile.read(link) == [1, 2, 3, 4, 5])
        let dangling = directory + "/dangling.bin"
        #expect(symlink(missing, dangling) == 0)
        #expect(throws: InputFileError(path: dangling, kind: .notFound)) { try InputFile.read(dangling) }
    }
}
