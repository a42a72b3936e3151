import BleotaZlib

/// A ZIP archive read from bytes that may be hostile (a firmware package
/// downloaded from anywhere): the central directory is parsed with every
/// offset and size checked against the buffer, members are stored or
/// deflated, and inflation stops at the member's declared size and must end
/// exactly there with the right CRC-32.
///
/// Why not ZIPFoundation, which the tests use to write archives: on Linux its
/// 0.9.20 (the version available here) spins forever on a deflate stream
/// that does not end before the file does (weichsel/ZIPFoundation#389, found
/// here by `FuzzNordicPackage` in 20 seconds); a firmware tool must not hang
/// on a damaged download. Zip64, encryption, multi-disk archives and methods
/// other than stored and deflate are refused by name: firmware packages use none.
public struct ZipArchive: Sendable {
    public struct Member: Sendable, Equatable {
        public var name: String
        public enum Method: UInt16, Sendable { case stored = 0, deflated = 8 }
        public var method: Method
        public var crc32: UInt32
        public var compressedSize: Int
        public var size: Int
        /// Offset of the member's local header in the archive.
        public var localHeaderOffset: Int
        /// A directory entry (name ending in `/`).
        public var isDirectory: Bool { name.hasSuffix("/") }
    }

    public let bytes: [UInt8]
    /// In central-directory order.
    public let members: [Member]

    /// A relative path that stays inside the archive: no leading `/`, no `..`
    /// component, no backslash (a Windows separator), no NUL.
    public static func isSafeMemberName(_ name: String) -> Bool {
        guard !name.isEmpty, !name.hasPrefix("/"), !name.contains("\\"), !name.contains("\0") else { return false }
        return !name.split(separator: "/", omittingEmptySubsequences: false).contains("..")
    }

    /// A member name as an error prints it: control characters escaped, at most 200 characters.
    public static func printable(_ name: String) -> String {
        String(
            name.unicodeScalars.flatMap { scalar -> [Character] in
                scalar.value < 0x20 || scalar.value == 0x7F ? Array("\\x" + String(scalar.value, radix: 16)) : [Character(scalar)]
            }.prefix(200))
    }

    /// Parses the central directory of `bytes`.
    public init(_ bytes: [UInt8]) throws(DecodingError) {
        self.bytes = bytes
        let end = try Self.endOfCentralDirectory(bytes)
        var reader = ByteReader(bytes)
        try reader.skip(to: end)
        try reader.expect(0x0605_4B50, "end of central directory signature")
        let disk = try reader.readUInt16(.little, "EOCD disk number")
        let directoryDisk = try reader.readUInt16(.little, "EOCD central directory disk")
        _ = try reader.readUInt16(.little, "EOCD entries on this disk")
        let count = Int(try reader.readUInt16(.little, "EOCD entry count"))
        let directorySize = Int(try reader.readUInt32(.little, "EOCD central directory size"))
        let directoryOffset = Int(try reader.readUInt32(.little, "EOCD central directory offset"))
        guard disk == 0, directoryDisk == 0 else {
            throw DecodingError(field: "EOCD disk number", offset: end + 4, reason: .invalidValue("a multi-disk archive"))
        }
        guard count != 0xFFFF, directorySize != 0xFFFF_FFFF, directoryOffset != 0xFFFF_FFFF else {
            throw DecodingError(field: "EOCD entry count", offset: end + 10, reason: .invalidValue("a Zip64 archive (firmware packages are far smaller)"))
        }
        guard directoryOffset <= end, directorySize <= end - directoryOffset else {
            throw DecodingError(
                field: "EOCD central directory offset", offset: end + 16,
                reason: .invalidValue("the directory (\(directorySize) bytes at \(directoryOffset)) does not lie before its end record at \(end)"))
        }
        var directory = ByteReader(bytes)
        try directory.skip(to: directoryOffset)
        var members: [Member] = []
        members.reserveCapacity(min(count, 1024))
        for _ in 0..<count {
            let start = directory.offset
            try directory.expect(0x0201_4B50, "central directory entry signature")
            try directory.skip(4, "entry versions")  // versions made by and needed
            let flags = try directory.readUInt16(.little, "entry flags")
            let methodOffset = directory.offset
            let rawMethod = try directory.readUInt16(.little, "entry compression method")
            try directory.skip(4)  // time and date
            let crc = try directory.readUInt32(.little, "entry CRC-32")
            let compressedSize = Int(try directory.readUInt32(.little, "entry compressed size"))
            let size = Int(try directory.readUInt32(.little, "entry size"))
            let nameLength = Int(try directory.readUInt16(.little, "entry name length"))
            let extraLength = Int(try directory.readUInt16(.little, "entry extra length"))
            let commentLength = Int(try directory.readUInt16(.little, "entry comment length"))
            try directory.skip(8)  // disk, internal and external attributes
            let localOffset = Int(try directory.readUInt32(.little, "entry local header offset"))
            let nameOffset = directory.offset
            let nameBytes = try directory.readBytes(nameLength, "entry name")
            try directory.skip(extraLength + commentLength)
            guard flags & 0x0001 == 0 else {
                throw DecodingError(field: "entry flags", offset: start + 8, reason: .invalidValue("member is encrypted"))
            }
            guard let method = Member.Method(rawValue: rawMethod) else {
                throw DecodingError(
                    field: "entry compression method", offset: methodOffset,
                    reason: .invalidValue("method \(rawMethod); only stored (0) and deflate (8) are read"))
            }
            guard compressedSize != 0xFFFF_FFFF, size != 0xFFFF_FFFF, localOffset != 0xFFFF_FFFF else {
                throw DecodingError(field: "entry size", offset: start + 20, reason: .invalidValue("a Zip64 member"))
            }
            guard let name = String(validating: nameBytes, as: UTF8.self) else {
                throw DecodingError(field: "entry name", offset: nameOffset, reason: .invalidValue("not UTF-8"))
            }
            members.append(
                Member(
                    name: name, method: method, crc32: crc, compressedSize: compressedSize, size: size,
                    localHeaderOffset: localOffset))
        }
        self.members = members
    }

    /// The contents of `member`, refusing more than `limit` bytes before inflating them.
    public func contents(of member: Member, limit: Int) throws(DecodingError) -> [UInt8] {
        guard member.size <= limit else {
            throw DecodingError(
                field: "member '\(member.name)'", offset: member.localHeaderOffset,
                reason: .invalidValue("unpacks to \(member.size) bytes, more than \(limit)"))
        }
        var reader = ByteReader(bytes)
        try reader.skip(to: member.localHeaderOffset)
        try reader.expect(0x0403_4B50, "local header signature")
        try reader.skip(22)
        let nameLength = Int(try reader.readUInt16(.little, "local header name length"))
        let extraLength = Int(try reader.readUInt16(.little, "local header extra length"))
        try reader.skip(nameLength + extraLength)
        let dataOffset = reader.offset
        let stored = try reader.readBytes(member.compressedSize, "member '\(member.name)' data")
        let output: [UInt8]
        switch member.method {
        case .stored:
            guard member.compressedSize == member.size else {
                throw DecodingError(
                    field: "member '\(member.name)'", offset: dataOffset,
                    reason: .invalidValue("stored, yet \(member.compressedSize) bytes are said to hold \(member.size)"))
            }
            output = stored
        case .deflated:
            do {
                let inflater = try Inflater(format: .raw)
                output = try inflater.update(stored, limit: member.size + 1)
                guard inflater.isFinished else {
                    throw DecodingError(
                        field: "member '\(member.name)' data", offset: dataOffset,
                        reason: .invalidValue(
                            output.count > member.size
                                ? "inflates to more than the \(member.size) bytes its entry says"
                                : "the deflate stream does not end within its \(member.compressedSize) bytes"))
                }
            } catch let error as DecodingError {
                throw error
            } catch {
                throw DecodingError(field: "member '\(member.name)' data", offset: dataOffset, reason: .invalidValue("\(error)"))
            }
        }
        guard output.count == member.size else {
            throw DecodingError(
                field: "member '\(member.name)' data", offset: dataOffset,
                reason: .invalidValue("holds \(output.count) bytes, its entry says \(member.size)"))
        }
        let crc = Zlib.crc32(0, output)
        guard crc == member.crc32 else {
            throw DecodingError(
                field: "member '\(member.name)' data", offset: dataOffset,
                reason: .invalidValue("CRC-32 is \(hex32(crc)), its entry says \(hex32(member.crc32))"))
        }
        return output
    }

    /// The end-of-central-directory record: the last one within its 64 KiB
    /// comment's reach of the end.
    private static func endOfCentralDirectory(_ bytes: [UInt8]) throws(DecodingError) -> Int {
        guard bytes.count >= 22 else {
            throw DecodingError(field: "end of central directory", offset: 0, reason: .truncated(needed: 22 - bytes.count))
        }
        var candidate = bytes.count - 22
        let lowest = max(0, bytes.count - 22 - 0xFFFF)
        while candidate >= lowest {
            if bytes[candidate] == 0x50, bytes[candidate + 1] == 0x4B, bytes[candidate + 2] == 0x05, bytes[candidate + 3] == 0x06 {
                return candidate
            }
            candidate -= 1
        }
        throw DecodingError(field: "end of central directory", offset: lowest, reason: .invalidValue("no end record: not a ZIP archive, or cut short"))
    }
}

extension ByteReader {
    /// Moves to `position`, which must lie inside the buffer.
    fileprivate mutating func skip(to position: Int) throws(DecodingError) {
        try skip(position - offset, "offset \(position)")
    }

    /// Reads a 32-bit little-endian signature and checks it.
    fileprivate mutating func expect(_ signature: UInt32, _ field: String) throws(DecodingError) {
        let start = offset
        let found = try readUInt32(.little, field)
        guard found == signature else {
            throw DecodingError(field: field, offset: start, reason: .invalidValue("found 0x\(String(found, radix: 16)), expected 0x\(String(signature, radix: 16))"))
        }
    }
}
