import BleotaCodec

/// MCUmgr's management groups (Zephyr `include/zephyr/mgmt/mcumgr/mgmt/mgmt_defines.h`).
public struct SMPGroup: RawRepresentable, Sendable, Hashable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public init(integerLiteral value: UInt16) { rawValue = value }

    public static let os: SMPGroup = 0
    public static let image: SMPGroup = 1
    public static let statistics: SMPGroup = 2
    public static let settings: SMPGroup = 3
    public static let log: SMPGroup = 4
    public static let crash: SMPGroup = 5
    public static let split: SMPGroup = 6
    public static let run: SMPGroup = 7
    public static let fileSystem: SMPGroup = 8
    public static let shell: SMPGroup = 9
    public static let enumeration: SMPGroup = 10
    public static let zephyr: SMPGroup = 63

    public var description: String {
        switch self {
        case .os: "OS"
        case .image: "image"
        case .statistics: "statistics"
        case .settings: "settings"
        case .log: "log"
        case .crash: "crash"
        case .split: "split"
        case .run: "run"
        case .fileSystem: "file system"
        case .shell: "shell"
        case .enumeration: "enumeration"
        case .zephyr: "Zephyr"
        default: "group \(rawValue)"
        }
    }
}

/// A command: its group and its number within the group.
public struct SMPCommand: Sendable, Hashable, CustomStringConvertible {
    public var group: SMPGroup
    public var id: UInt8
    public init(group: SMPGroup, id: UInt8) {
        self.group = group
        self.id = id
    }

    // OS group (os_mgmt.h)
    public static let echo = SMPCommand(group: .os, id: 0)
    public static let taskStatistics = SMPCommand(group: .os, id: 2)
    public static let memoryPoolStatistics = SMPCommand(group: .os, id: 3)
    public static let dateTime = SMPCommand(group: .os, id: 4)
    public static let reset = SMPCommand(group: .os, id: 5)
    public static let parameters = SMPCommand(group: .os, id: 6)
    public static let applicationInfo = SMPCommand(group: .os, id: 7)
    public static let bootloaderInfo = SMPCommand(group: .os, id: 8)
    // Image group (img_mgmt.h)
    public static let imageState = SMPCommand(group: .image, id: 0)
    public static let imageUpload = SMPCommand(group: .image, id: 1)
    public static let imageErase = SMPCommand(group: .image, id: 5)
    // File-system group (fs_mgmt.h)
    public static let file = SMPCommand(group: .fileSystem, id: 0)
    public static let fileStatus = SMPCommand(group: .fileSystem, id: 1)
    public static let fileHash = SMPCommand(group: .fileSystem, id: 2)
    public static let fileHashTypes = SMPCommand(group: .fileSystem, id: 3)
    public static let fileClose = SMPCommand(group: .fileSystem, id: 4)

    static let names: [SMPCommand: String] = [
        .echo: "echo", .taskStatistics: "task statistics", .memoryPoolStatistics: "memory pool statistics",
        .dateTime: "date-time", .reset: "reset", .parameters: "MCUmgr parameters", .applicationInfo: "application info",
        .bootloaderInfo: "bootloader info", .imageState: "image state", .imageUpload: "image upload", .imageErase: "image erase",
        .slotInfo: "slot info",
        .file: "file", .fileStatus: "file status", .fileHash: "file hash", .fileHashTypes: "supported hash types", .fileClose: "file close",
    ]

    public var description: String { Self.names[self] ?? "\(group) command \(id)" }
}

/// MCUmgr's general return codes (`MGMT_ERR_*`): what v1 answers carry in `rc`,
/// and what v2 answers use for errors outside a group.
public struct SMPReturnCode: RawRepresentable, Sendable, Hashable, ExpressibleByIntegerLiteral {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public init(integerLiteral value: Int) { rawValue = value }

    public static let ok: SMPReturnCode = 0
    public static let unknown: SMPReturnCode = 1
    public static let noMemory: SMPReturnCode = 2
    public static let invalidArgument: SMPReturnCode = 3
    public static let timeout: SMPReturnCode = 4
    public static let noEntry: SMPReturnCode = 5
    public static let badState: SMPReturnCode = 6
    public static let messageTooLarge: SMPReturnCode = 7
    public static let notSupported: SMPReturnCode = 8
    public static let corrupt: SMPReturnCode = 9
    public static let busy: SMPReturnCode = 10
    public static let accessDenied: SMPReturnCode = 11
    public static let versionTooOld: SMPReturnCode = 12
    public static let versionTooNew: SMPReturnCode = 13

    static let names: [SMPReturnCode: String] = [
        .unknown: "unknown error", .noMemory: "out of memory", .invalidArgument: "invalid argument", .timeout: "timeout",
        .noEntry: "no such entry", .badState: "bad state", .messageTooLarge: "message too large", .notSupported: "not supported",
        .corrupt: "corrupt", .busy: "busy", .accessDenied: "access denied", .versionTooOld: "protocol version too old",
        .versionTooNew: "protocol version too new",
    ]
    public var name: String { Self.names[self] ?? "error \(rawValue)" }
}

/// The OS group's own codes (`OS_MGMT_ERR_*`).
public struct SMPOSReturnCode: RawRepresentable, Sendable, Hashable, ExpressibleByIntegerLiteral {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public init(integerLiteral value: Int) { rawValue = value }

    public static let unknown: SMPOSReturnCode = 1
    public static let invalidFormat: SMPOSReturnCode = 2
    public static let queryYieldsNoAnswer: SMPOSReturnCode = 3
    public static let rtcNotSet: SMPOSReturnCode = 4
    public static let rtcCommandFailed: SMPOSReturnCode = 5

    static let names: [SMPOSReturnCode: String] = [
        .unknown: "unknown error", .invalidFormat: "invalid format", .queryYieldsNoAnswer: "query yields no answer",
        .rtcNotSet: "RTC not set", .rtcCommandFailed: "RTC command failed",
    ]
    public var name: String { Self.names[self] ?? "OS error \(rawValue)" }
}

/// The image group's own codes (`IMG_MGMT_ERR_*`).
public struct SMPImageReturnCode: RawRepresentable, Sendable, Hashable, ExpressibleByIntegerLiteral {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public init(integerLiteral value: Int) { rawValue = value }

    public static let unknown: SMPImageReturnCode = 1
    public static let flashConfigQueryFailed: SMPImageReturnCode = 2
    public static let noImage: SMPImageReturnCode = 3
    public static let noTLVs: SMPImageReturnCode = 4
    public static let invalidTLV: SMPImageReturnCode = 5
    public static let multipleHashTLVs: SMPImageReturnCode = 6
    public static let invalidTLVSize: SMPImageReturnCode = 7
    public static let hashNotFound: SMPImageReturnCode = 8
    public static let noFreeSlot: SMPImageReturnCode = 9
    public static let flashOpenFailed: SMPImageReturnCode = 10
    public static let flashReadFailed: SMPImageReturnCode = 11
    public static let flashWriteFailed: SMPImageReturnCode = 12
    public static let flashEraseFailed: SMPImageReturnCode = 13
    public static let invalidSlot: SMPImageReturnCode = 14
    public static let noFreeMemory: SMPImageReturnCode = 15
    public static let flashContextAlreadySet: SMPImageReturnCode = 16
    public static let flashContextNotSet: SMPImageReturnCode = 17
    public static let flashAreaDeviceNull: SMPImageReturnCode = 18
    public static let invalidPageOffset: SMPImageReturnCode = 19
    public static let invalidOffset: SMPImageReturnCode = 20
    public static let invalidLength: SMPImageReturnCode = 21
    public static let invalidImageHeader: SMPImageReturnCode = 22
    public static let invalidImageHeaderMagic: SMPImageReturnCode = 23
    public static let invalidHash: SMPImageReturnCode = 24
    public static let invalidFlashAddress: SMPImageReturnCode = 25
    public static let versionGetFailed: SMPImageReturnCode = 26
    public static let currentVersionIsNewer: SMPImageReturnCode = 27
    public static let imageAlreadyPending: SMPImageReturnCode = 28
    public static let invalidImageVectorTable: SMPImageReturnCode = 29
    public static let imageTooLarge: SMPImageReturnCode = 30
    public static let imageDataOverrun: SMPImageReturnCode = 31
    public static let imageConfirmationDenied: SMPImageReturnCode = 32
    public static let imageSettingTestToActiveDenied: SMPImageReturnCode = 33
    public static let activeSlotNotKnown: SMPImageReturnCode = 34

    static let names: [SMPImageReturnCode: String] = [
        .unknown: "unknown error", .flashConfigQueryFailed: "flash configuration query failed", .noImage: "no image",
        .noTLVs: "no TLVs", .invalidTLV: "invalid TLV", .multipleHashTLVs: "multiple hash TLVs", .invalidTLVSize: "invalid TLV size",
        .hashNotFound: "hash not found", .noFreeSlot: "no free slot", .flashOpenFailed: "flash open failed",
        .flashReadFailed: "flash read failed", .flashWriteFailed: "flash write failed", .flashEraseFailed: "flash erase failed",
        .invalidSlot: "invalid slot", .noFreeMemory: "no free memory", .flashContextAlreadySet: "flash context already set",
        .flashContextNotSet: "flash context not set", .flashAreaDeviceNull: "flash area device null",
        .invalidPageOffset: "invalid page offset", .invalidOffset: "invalid offset", .invalidLength: "invalid length",
        .invalidImageHeader: "invalid image header", .invalidImageHeaderMagic: "invalid image header magic",
        .invalidHash: "invalid hash", .invalidFlashAddress: "invalid flash address", .versionGetFailed: "version get failed",
        .currentVersionIsNewer: "current version is newer", .imageAlreadyPending: "image already pending",
        .invalidImageVectorTable: "invalid image vector table", .imageTooLarge: "image too large",
        .imageDataOverrun: "image data overrun", .imageConfirmationDenied: "image confirmation denied",
        .imageSettingTestToActiveDenied: "setting the active image to test denied", .activeSlotNotKnown: "active slot not known",
    ]
    public var name: String { Self.names[self] ?? "image error \(rawValue)" }
}

/// The file-system group's own codes (`FS_MGMT_ERR_*`).
public struct SMPFileSystemReturnCode: RawRepresentable, Sendable, Hashable, ExpressibleByIntegerLiteral {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public init(integerLiteral value: Int) { rawValue = value }

    public static let unknown: SMPFileSystemReturnCode = 1
    public static let invalidName: SMPFileSystemReturnCode = 2
    public static let fileNotFound: SMPFileSystemReturnCode = 3
    public static let fileIsDirectory: SMPFileSystemReturnCode = 4
    public static let fileOpenFailed: SMPFileSystemReturnCode = 5
    public static let fileSeekFailed: SMPFileSystemReturnCode = 6
    public static let fileReadFailed: SMPFileSystemReturnCode = 7
    public static let fileTruncateFailed: SMPFileSystemReturnCode = 8
    public static let fileDeleteFailed: SMPFileSystemReturnCode = 9
    public static let fileWriteFailed: SMPFileSystemReturnCode = 10
    public static let fileOffsetNotValid: SMPFileSystemReturnCode = 11
    public static let fileOffsetLargerThanFile: SMPFileSystemReturnCode = 12
    public static let checksumHashNotFound: SMPFileSystemReturnCode = 13
    public static let mountPointNotFound: SMPFileSystemReturnCode = 14
    public static let readOnlyFileSystem: SMPFileSystemReturnCode = 15
    public static let fileEmpty: SMPFileSystemReturnCode = 16

    static let names: [SMPFileSystemReturnCode: String] = [
        .unknown: "unknown error", .invalidName: "invalid file name", .fileNotFound: "file not found",
        .fileIsDirectory: "file is a directory", .fileOpenFailed: "file open failed", .fileSeekFailed: "file seek failed",
        .fileReadFailed: "file read failed", .fileTruncateFailed: "file truncate failed", .fileDeleteFailed: "file delete failed",
        .fileWriteFailed: "file write failed", .fileOffsetNotValid: "offset not valid",
        .fileOffsetLargerThanFile: "offset larger than file", .checksumHashNotFound: "checksum hash not found",
        .mountPointNotFound: "mount point not found", .readOnlyFileSystem: "read-only file system", .fileEmpty: "file empty",
    ]
    public var name: String { Self.names[self] ?? "file system error \(rawValue)" }
}

/// An error code as an answer carries it: a general one (v1's `rc`, or v2
/// outside a group) or a group's own (v2's `err {group, rc}`).
public enum SMPErrorCode: Sendable, Hashable {
    case general(SMPReturnCode)
    case os(SMPOSReturnCode)
    case image(SMPImageReturnCode)
    case fileSystem(SMPFileSystemReturnCode)
    case other(group: SMPGroup, rc: Int)

    public init(group: SMPGroup?, rc: Int) {
        switch group {
        case nil: self = .general(SMPReturnCode(rawValue: rc))
        case .os?: self = .os(SMPOSReturnCode(rawValue: rc))
        case .image?: self = .image(SMPImageReturnCode(rawValue: rc))
        case .fileSystem?: self = .fileSystem(SMPFileSystemReturnCode(rawValue: rc))
        case let other?: self = .other(group: other, rc: rc)
        }
    }

    /// The group whose codes `rc` uses; nil for the general codes.
    public var group: SMPGroup? {
        switch self {
        case .general: nil
        case .os: .os
        case .image: .image
        case .fileSystem: .fileSystem
        case .other(let group, _): group
        }
    }

    public var rc: Int {
        switch self {
        case .general(let code): code.rawValue
        case .os(let code): code.rawValue
        case .image(let code): code.rawValue
        case .fileSystem(let code): code.rawValue
        case .other(_, let rc): rc
        }
    }

    public var name: String {
        switch self {
        case .general(let code): code.name
        case .os(let code): code.name
        case .image(let code): code.name
        case .fileSystem(let code): code.name
        case .other(let group, let rc): "\(group) error \(rc)"
        }
    }

    /// The general code a v1 client gets for this error: Zephyr's per-group
    /// translators (`img_mgmt_translate_error_code`, `fs_mgmt_…`, `os_mgmt_…`).
    public var general: SMPReturnCode {
        switch self {
        case .general(let code): code
        case .image(let code):
            switch code {
            case .noImage, .noTLVs: .noEntry
            case .noFreeSlot, .currentVersionIsNewer, .imageAlreadyPending: .badState
            case .noFreeMemory: .noMemory
            case .invalidSlot, .invalidPageOffset, .invalidOffset, .invalidLength, .invalidImageHeader, .invalidHash,
                .invalidFlashAddress:
                .invalidArgument
            default: .unknown
            }
        case .fileSystem(let code):
            switch code {
            case .invalidName, .checksumHashNotFound: .invalidArgument
            case .fileNotFound, .mountPointNotFound: .noEntry
            default: .unknown
            }
        case .os(let code):
            switch code {
            case .invalidFormat: .invalidArgument
            case .queryYieldsNoAnswer, .rtcNotSet: .noEntry
            default: .unknown
            }
        case .other: .unknown
        }
    }
}

/// An error a device answered with, named as Zephyr's headers name it so a
/// person can tell what failed and why.
public struct SMPDeviceError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: SMPErrorCode
    /// A v1 device's optional reason text (`rsn`), or bleota's own explanation.
    public var reason: String?

    public init(_ code: SMPErrorCode, reason: String? = nil) {
        self.code = code
        self.reason = reason
    }

    public init(group: SMPGroup?, rc: Int, reason: String? = nil) {
        self.init(SMPErrorCode(group: group, rc: rc), reason: reason)
    }

    /// Finds an error in a response body; nil when it reports success.
    public init?(response body: CBOR) {
        if let err = body["err"], let rc = err["rc"]?.int {
            guard rc != 0 else { return nil }
            self.init(group: err["group"]?.int.map { SMPGroup(rawValue: UInt16(clamping: $0)) }, rc: rc)
        } else if let rc = body["rc"]?.int, rc != 0 {
            self.init(group: nil, rc: rc, reason: body["rsn"]?.string)
        } else {
            return nil
        }
    }

    public var group: SMPGroup? { code.group }
    public var rc: Int { code.rc }

    /// As a v2 device sends it.
    public var body: CBOR {
        if let group { return .textMap(["err": .textMap(["group": CBOR(Int(group.rawValue)), "rc": CBOR(rc)])]) }
        return .textMap(["rc": CBOR(rc)])
    }

    public var description: String {
        var text =
            group.map { "the device's \($0) group answered \(code.name) (rc \(rc))" }
            ?? "the device answered \(code.name) (rc \(rc))"
        if let reason, !reason.isEmpty { text += ": \(reason)" }
        return text
    }
}
