import BleotaCodec

/// Reading the files a command is given (images, keys, files to push), with
/// one-line errors that say what to do. Every protocol's `prepareImage` reads
/// through here, so the checks (missing, a directory, unreadable) are the same
/// for all of them.
public enum ImageFiles {
    /// The whole file; refused with a one-line error when it is missing, not a
    /// regular file (a FIFO would block, a device never end), or over `limit` bytes.
    public static func read(_ path: String, limit: UInt64 = .max) throws(TransferError) -> [UInt8] {
        do { return try InputFile.read(path, limit: limit) } catch {
            throw TransferError(.badInput, step: .load, error.description)
        }
    }

    /// The first bytes of a file, for ``UpdateProtocol/imageAffinity(_:)``; empty when
    /// it cannot be read (reading it whole reports why).
    public static func probe(_ path: String) -> ImageProbe {
        ImageProbe(path: path, head: (try? InputFile.prefix(path, count: 64)) ?? [])
    }
}
