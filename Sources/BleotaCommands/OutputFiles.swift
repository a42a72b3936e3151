import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaProtocols
import BleotaSystem
import Foundation

/// Reads a whole input file (a file to push, an MCUboot image, a key) through
/// ``InputFile``, as images are read: only regular files, so a FIFO or a device
/// is refused with what it is instead of hanging or reading forever.
func readInputFile(_ path: String) throws -> [UInt8] {
    do { return try ImageFiles.read(path) } catch { throw error.commandFailure }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory,
/// flushed, then renamed over the target — so `path` is either the old file or
/// the complete new one, never half-written.
func writeFileAtomically(_ bytes: [UInt8], to path: String) throws {
    try checkOutputPath(path)
    do {
        try AtomicFile.write(bytes, to: path)
    } catch {
        throw CommandFailure(.failure, "\(path): write failed: \(String(cString: strerror(error.code))); nothing was changed")
    }
}

/// Refuses an output path that could never be written (empty, in a missing
/// directory, or a directory itself). Commands call it before they connect,
/// so a typo costs nothing rather than a whole transfer or tuning run.
func checkOutputPath(_ path: String) throws {
    guard !path.isEmpty else { throw CommandFailure(.usage, "the output path is empty: give a file name, e.g. -o hello.txt") }
    let url = URL(fileURLWithPath: path)
    let directory = url.deletingLastPathComponent()
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
        throw CommandFailure(.badInput, "\(path): the directory \(directory.path) does not exist: create it first")
    }
    if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
        throw CommandFailure(.badInput, "\(path) is a directory: give a file name inside it")
    }
}
