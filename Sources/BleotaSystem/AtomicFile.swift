import BleotaCodec
import BleotaLink
import Foundation
import Glibc

extension FirmwareImage {
    /// Writes the image in `format`, atomically: a temporary file in the same
    /// directory, synced, then renamed over `path`.
    ///
    /// Every format is written streaming — gaps and records go to the file a
    /// piece at a time — so memory stays near the image's own size whatever
    /// the output's.
    public func write(to path: String, format: ImageFormat, fill: UInt8 = 0xFF) throws(ImageError) {
        do {
            try AtomicFile.write(to: path) { sink in
                switch format {
                case .bin: forEachChunk(fill: fill) { chunk in chunk.withUnsafeBytes(sink) }
                case .intelHex: IntelHex.encode(self, to: sink)
                case .srec: SRecord.encode(self, to: sink)
                }
            }
        } catch {
            throw ImageError(file: path, kind: .unwritable(String(cString: strerror(error.code))))
        }
    }
}

/// Writes a file so that it is either the old one or the complete new one:
/// a temporary file in the same directory, written, synced, then renamed over
/// the target. Used for converted images and pulled files alike.
public enum AtomicFile {
    public struct Failure: Error, Sendable, Equatable {
        /// The errno of the failed step.
        public var code: Int32
    }

    /// `permissions` are the new file's mode (before the umask): 0o600 for secrets.
    public static func write(_ bytes: [UInt8], to path: String, permissions: mode_t = 0o644) throws(Failure) {
        try write(to: path, permissions: permissions) { sink in bytes.withUnsafeBytes(sink) }
    }

    /// Writes what `produce` passes to its sink, as it comes. After a failed
    /// write the sink drops everything, and the error is thrown once `produce`
    /// returns; the target is then untouched and the temporary file removed.
    public static func write(
        to path: String, permissions: mode_t = 0o644,
        _ produce: (_ sink: (UnsafeRawBufferPointer) -> Void) -> Void
    ) throws(Failure) {
        let name = (path as NSString).lastPathComponent
        let directory = (path as NSString).deletingLastPathComponent
        let temporary = (directory.isEmpty ? "." : directory) + "/.\(name).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        // Registered before it exists: a SIGINT or SIGTERM while writing removes it.
        let cleanup = TemporaryPaths.removingOnExit([temporary])
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, permissions)
        guard descriptor >= 0 else {
            let code = errno
            cleanup.keep()
            throw Failure(code: code)
        }
        var failure: Int32 = 0
        produce { buffer in
            var offset = 0
            while failure == 0, offset < buffer.count {
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno != EINTR { failure = errno }
                    continue
                }
                offset += written
            }
        }
        if failure == 0 && fsync(descriptor) != 0 { failure = errno }
        close(descriptor)
        if failure == 0 && rename(temporary, path) != 0 { failure = errno }
        if failure != 0 {
            cleanup.removeNow()
            throw Failure(code: failure)
        }
        cleanup.keep()
    }
}
