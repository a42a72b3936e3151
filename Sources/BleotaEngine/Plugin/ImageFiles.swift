import Foundation

/// Reading the files a command is given (images, keys, files to push), with
/// one-line errors that say what to do. Every protocol's `prepareImage` reads
/// through here, so the checks (missing, a directory, unreadable) are the same
/// for all of them.
public enum ImageFiles {
    public static func read(_ path: String) throws(TransferError) -> [UInt8] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw TransferError(.badInput, step: .load, "\(path): no such file: check the path")
        }
        guard !isDirectory.boolValue else { throw TransferError(.badInput, step: .load, "\(path) is a directory: give a file") }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TransferError(.badInput, step: .load, "\(path): cannot read the file: check its permissions")
        }
        return [UInt8](data)
    }

    /// The first bytes of a file, for ``UpdateProtocol/imageAffinity(_:)``; empty when unreadable.
    public static func probe(_ path: String) -> ImageProbe {
        let head = FileHandle(forReadingAtPath: path).map { handle -> [UInt8] in
            defer { try? handle.close() }
            return [UInt8]((try? handle.read(upToCount: 64)) ?? Data())
        } ?? []
        return ImageProbe(path: path, head: head)
    }
}
