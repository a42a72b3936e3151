import Foundation

/// What a path names, as `stat` reports it.
public enum FileType: Sendable, Hashable, CustomStringConvertible {
    case regular
    case directory
    case fifo
    case characterDevice
    case blockDevice
    case socket
    case symbolicLink
    case unknown

    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFIFO: self = .fifo
        case S_IFCHR: self = .characterDevice
        case S_IFBLK: self = .blockDevice
        case S_IFSOCK: self = .socket
        case S_IFLNK: self = .symbolicLink
        default: self = .unknown
        }
    }

    /// With its article, for "PATH is …".
    public var description: String {
        switch self {
        case .regular: "a regular file"
        case .directory: "a directory"
        case .fifo: "a FIFO (named pipe)"
        case .characterDevice: "a character device"
        case .blockDevice: "a block device"
        case .socket: "a socket"
        case .symbolicLink: "a symbolic link"
        case .unknown: "not a regular file"
        }
    }
}

/// Why an input file could not be read, naming the path as the user gave it.
public struct InputFileError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        case notFound
        /// A FIFO, device, socket or directory: reading one can block forever or never end.
        case notRegularFile(FileType)
        case permissionDenied
        /// Any other failure, with `strerror`'s text.
        case unreadable(String)
        /// The file holds more bytes than the caller accepts; nothing was read.
        case tooLarge(size: UInt64, limit: UInt64)
    }

    public var path: String
    public var kind: Kind

    public init(path: String, kind: Kind) {
        self.path = path
        self.kind = kind
    }

    public var description: String {
        switch kind {
        case .notFound: "\(path): no such file: check the path"
        case .notRegularFile(let type): "\(path) is \(type): give a regular file"
        case .permissionDenied: "\(path): cannot read (permission denied): check its permissions"
        case .unreadable(let why): "\(path): cannot read (\(why))"
        case .tooLarge(let size, let limit): "\(path) is \(size) bytes, more than the limit of \(limit) bytes"
        }
    }
}

/// Reading the files a user names (images, keys, files to push): regular files
/// only, checked before they are opened.
///
/// A FIFO opened for reading blocks until a writer appears, and `/dev/zero`
/// never ends; neither is an image. So the path is `stat`ed first and anything
/// but a regular file is refused with what it is. The file is then opened with
/// `O_NONBLOCK` (which a regular file ignores) and checked again with `fstat`
/// on the open descriptor, so a path swapped for a FIFO in between cannot hang
/// the open or the read either.
public enum InputFile {
    /// The size of the regular file at `path`, without opening it.
    public static func size(_ path: String) throws(InputFileError) -> UInt64 {
        var info = stat()
        guard stat(path, &info) == 0 else { throw failure(path, errno) }
        let type = FileType(mode: info.st_mode)
        guard type == .regular else { throw InputFileError(path: path, kind: .notRegularFile(type)) }
        return UInt64(info.st_size)
    }

    /// All of the regular file at `path`, read into one buffer. A file larger
    /// than `limit` is refused by its size before anything is read.
    public static func read(_ path: String, limit: UInt64 = .max) throws(InputFileError) -> [UInt8] {
        let expected = try size(path)
        guard expected <= limit else { throw InputFileError(path: path, kind: .tooLarge(size: expected, limit: limit)) }
        return try withOpenFile(path) { descriptor, size throws(InputFileError) in
            guard size <= limit else { throw InputFileError(path: path, kind: .tooLarge(size: size, limit: limit)) }
            return try readAll(descriptor, count: Int(size), path: path)
        }
    }

    /// At most the first `count` bytes of the regular file at `path` (fewer when it is shorter).
    public static func prefix(_ path: String, count: Int) throws(InputFileError) -> [UInt8] {
        _ = try size(path)
        return try withOpenFile(path) { descriptor, size throws(InputFileError) in
            try readAll(descriptor, count: Int(min(size, UInt64(max(0, count)))), path: path)
        }
    }

    /// Opens `path` read-only without blocking, checks the descriptor is a regular
    /// file, and passes it and its size to `body`.
    private static func withOpenFile<T>(
        _ path: String,
        _ body: (Int32, UInt64) throws(InputFileError) -> T
    ) throws(InputFileError) -> T {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else { throw failure(path, errno) }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw failure(path, errno) }
        let type = FileType(mode: info.st_mode)
        guard type == .regular else { throw InputFileError(path: path, kind: .notRegularFile(type)) }
        return try body(descriptor, UInt64(info.st_size))
    }

    /// Reads up to `count` bytes straight into the array's storage, so a large
    /// image is held once; stops early at end of file.
    private static func readAll(_ descriptor: Int32, count: Int, path: String) throws(InputFileError) -> [UInt8] {
        try read(descriptor, count: count, at: nil, path: path)
    }

    /// Up to `count` bytes from `descriptor` — at file offset `position` (`pread`), or from
    /// where it stands — retrying interrupted reads; fewer only at end of file.
    static func read(_ descriptor: Int32, count: Int, at position: Int?, path: String) throws(InputFileError) -> [UInt8] {
        var code: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, filled in
            var done = 0
            while done < count {
                let got =
                    position.map { pread(descriptor, buffer.baseAddress! + done, count - done, off_t($0 + done)) }
                    ?? systemRead(descriptor, buffer.baseAddress! + done, count - done)
                if got < 0 {
                    if errno == EINTR { continue }
                    code = errno
                    break
                }
                if got == 0 { break }
                done += got
            }
            filled = done
        }
        if code != 0 { throw failure(path, code) }
        return bytes
    }

    static func failure(_ path: String, _ code: Int32) -> InputFileError {
        switch code {
        case ENOENT, ENOTDIR: InputFileError(path: path, kind: .notFound)
        case EACCES, EPERM: InputFileError(path: path, kind: .permissionDenied)
        default: InputFileError(path: path, kind: .unreadable(String(cString: strerror(code))))
        }
    }
}

/// read(2), under a name apart from `InputFile.read`: the C library's module differs by platform.
private func systemRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    #if canImport(Darwin)
    Darwin.read(descriptor, buffer, count)
    #else
    Glibc.read(descriptor, buffer, count)
    #endif
}
