import BleotaCodec
import Crypto
import Foundation

/// A Secure DFU init packet: the `.dat` beside each image of an nrfutil
/// package, sent as the command object before the image. It says what the
/// image is (application, SoftDevice, bootloader), which versions it needs
/// and replaces, its hash, and, when signed, an ECDSA P-256 signature over
/// the command. Schema: `protocols/nordic-dfu/init-packet.proto`.
package struct NordicInitPacket: Sendable, Hashable {
    /// `FwType`.
    package enum FirmwareType: UInt32, Sendable, Hashable, CustomStringConvertible {
        case application = 0, softDevice = 1, bootloader = 2, softDeviceAndBootloader = 3, externalApplication = 4

        package var description: String {
            switch self {
            case .application: "application"
            case .softDevice: "SoftDevice"
            case .bootloader: "bootloader"
            case .softDeviceAndBootloader: "SoftDevice and bootloader"
            case .externalApplication: "external application"
            }
        }
    }

    /// `HashType`.
    package enum HashType: UInt32, Sendable, Hashable, CustomStringConvertible {
        case none = 0, crc = 1, sha128 = 2, sha256 = 3, sha512 = 4

        package var description: String {
            switch self {
            case .none: "none"
            case .crc: "CRC-32"
            case .sha128: "SHA-128"
            case .sha256: "SHA-256"
            case .sha512: "SHA-512"
            }
        }
    }

    /// `ValidationType`: how the bootloader checks the image at each boot (SDK 15.1+).
    package enum BootValidationType: UInt32, Sendable, Hashable {
        case none = 0, generatedCRC = 1, sha256 = 2, ecdsaP256SHA256 = 3
    }

    /// `SignatureType`.
    package enum SignatureType: UInt32, Sendable, Hashable {
        case ecdsaP256SHA256 = 0, ed25519 = 1
    }

    /// The SoftDevice firmware ID meaning "any SoftDevice, or none" in `sd_req`.
    package static let anySoftDevice: UInt32 = 0xFFFE

    package var firmwareVersion: UInt32?
    package var hardwareVersion: UInt32?
    /// `sd_req`: the SoftDevice firmware IDs the image runs on.
    package var softDeviceRequirements: [UInt32] = []
    package var type: FirmwareType?
    package var softDeviceSize: UInt32 = 0
    package var bootloaderSize: UInt32 = 0
    package var applicationSize: UInt32 = 0
    package var hashType: HashType?
    /// The image's digest in the usual order (the packet stores it reversed).
    package var hash: [UInt8] = []
    package var isDebug = false
    package var bootValidation: [(type: BootValidationType, bytes: [UInt8])] = []
    package var signatureType: SignatureType?
    /// As stored: for ECDSA P-256, r then s, each least significant byte first.
    package var signature: [UInt8] = []
    /// The bytes the signature covers: the `InitCommand` exactly as it stood
    /// in the signed packet (the payload of `Command.init`, as the SDK's
    /// `nrf_dfu_validation.c` records it while decoding); nil when unsigned.
    package private(set) var signedBytes: [UInt8]?

    /// The total image size the command announces (SoftDevice + bootloader + application).
    package var imageSize: UInt64 { UInt64(softDeviceSize) + UInt64(bootloaderSize) + UInt64(applicationSize) }

    package init(
        firmwareVersion: UInt32? = nil, hardwareVersion: UInt32? = nil, softDeviceRequirements: [UInt32] = [],
        type: FirmwareType, softDeviceSize: UInt32 = 0, bootloaderSize: UInt32 = 0, applicationSize: UInt32 = 0,
        hashType: HashType = .sha256, hash: [UInt8], isDebug: Bool = false
    ) {
        self.firmwareVersion = firmwareVersion
        self.hardwareVersion = hardwareVersion
        self.softDeviceRequirements = softDeviceRequirements
        self.type = type
        self.softDeviceSize = softDeviceSize
        self.bootloaderSize = bootloaderSize
        self.applicationSize = applicationSize
        self.hashType = hashType
        self.hash = hash
        self.isDebug = isDebug
    }

    package static func == (left: Self, right: Self) -> Bool { left.encode() == right.encode() }
    package func hash(into hasher: inout Hasher) { hasher.combine(encode()) }

    // MARK: Decoding

    /// Decodes a `.dat`. Unknown fields are skipped, as protobuf readers do;
    /// a packet without an init command, or with a reset command only, is refused.
    package init(decoding bytes: [UInt8]) throws(DecodingError) {
        var packet = ProtobufReader(bytes, name: "init packet")
        var command: ProtobufField?
        var signedCommand: ProtobufField?
        while let field = try packet.next() {
            switch field.number {
            case 1: command = field
            case 2: signedCommand = field
            default: continue
            }
        }
        if let signedCommand {
            guard signedCommand.wireType == .lengthDelimited else { throw Self.notAMessage(signedCommand, "signed_command") }
            var reader = ProtobufReader(bytes, field: signedCommand, name: "signed_command")
            var signedInner: ProtobufField?
            while let field = try reader.next() {
                switch field.number {
                case 1: signedInner = field
                case 2: signatureType = try Self.value(field, "signed_command.signature_type", "a signature type (0 ECDSA P-256, 1 Ed25519)")
                case 3: signature = try field.data("signed_command.signature")
                default: continue
                }
            }
            guard let signedInner else {
                throw DecodingError(field: "signed_command.command", offset: signedCommand.offset, reason: .invalidValue("missing"))
            }
            guard signatureType != nil else {
                throw DecodingError(field: "signed_command.signature_type", offset: signedCommand.offset, reason: .invalidValue("missing"))
            }
            guard command == nil else {
                throw DecodingError(field: "init packet", offset: 0, reason: .invalidValue("holds both a command and a signed command"))
            }
            command = signedInner
        }
        guard let command else {
            throw DecodingError(field: "init packet", offset: 0, reason: .invalidValue("holds neither a command nor a signed command"))
        }
        let initBytes = try decodeCommand(bytes, command)
        if signedCommand != nil { signedBytes = initBytes }
    }

    /// Decodes the command's init command; returns its bytes as they stood.
    private mutating func decodeCommand(_ bytes: [UInt8], _ command: ProtobufField) throws(DecodingError) -> [UInt8] {
        guard command.wireType == .lengthDelimited else { throw Self.notAMessage(command, "command") }
        var reader = ProtobufReader(bytes, field: command, name: "command")
        var operation: UInt32?
        var initCommand: ProtobufField?
        while let field = try reader.next() {
            switch field.number {
            case 1: operation = try field.uint32("command.op_code")
            case 2: initCommand = field
            default: continue
            }
        }
        guard operation == nil || operation == 1, let initCommand else {
            throw DecodingError(
                field: "command.op_code", offset: command.valueOffset,
                reason: .invalidValue("not an init command (op_code \(operation.map(String.init) ?? "missing"), \(initCommand == nil ? "no" : "an") init)"))
        }
        guard initCommand.wireType == .lengthDelimited else { throw Self.notAMessage(initCommand, "command.init") }
        var fields = ProtobufReader(bytes, field: initCommand, name: "init")
        while let field = try fields.next() {
            switch field.number {
            case 1: firmwareVersion = try field.uint32("init.fw_version")
            case 2: hardwareVersion = try field.uint32("init.hw_version")
            case 3: softDeviceRequirements += try field.packedUInt32("init.sd_req")
            case 4: type = try Self.value(field, "init.type", "a firmware type (0…4)")
            case 5: softDeviceSize = try field.uint32("init.sd_size")
            case 6: bootloaderSize = try field.uint32("init.bl_size")
            case 7: applicationSize = try field.uint32("init.app_size")
            case 8: try decodeHash(bytes, field)
            case 9: isDebug = try field.bool("init.is_debug")
            case 10: bootValidation.append(try Self.decodeBootValidation(bytes, field))
            default: continue
            }
        }
        return Array(initCommand.bytes)
    }

    private mutating func decodeHash(_ bytes: [UInt8], _ field: ProtobufField) throws(DecodingError) {
        guard field.wireType == .lengthDelimited else { throw Self.notAMessage(field, "init.hash") }
        var reader = ProtobufReader(bytes, field: field, name: "init.hash")
        var type: HashType?
        var stored: [UInt8]?
        while let inner = try reader.next() {
            switch inner.number {
            case 1: type = try Self.value(inner, "init.hash.hash_type", "a hash type (0…4)")
            case 2: stored = try inner.data("init.hash.hash")
            default: continue
            }
        }
        guard let type, let stored else {
            throw DecodingError(field: "init.hash", offset: field.offset, reason: .invalidValue("needs both hash_type and hash"))
        }
        hashType = type
        hash = stored.reversed()
    }

    private static func decodeBootValidation(_ bytes: [UInt8], _ field: ProtobufField) throws(DecodingError) -> (type: BootValidationType, bytes: [UInt8]) {
        guard field.wireType == .lengthDelimited else { throw notAMessage(field, "init.boot_validation") }
        var reader = ProtobufReader(bytes, field: field, name: "init.boot_validation")
        var type: BootValidationType?
        var value: [UInt8] = []
        while let inner = try reader.next() {
            switch inner.number {
            case 1: type = try Self.value(inner, "init.boot_validation.type", "a validation type (0…3)")
            case 2: value = try inner.data("init.boot_validation.bytes")
            default: continue
            }
        }
        guard let type else {
            throw DecodingError(field: "init.boot_validation.type", offset: field.offset, reason: .invalidValue("missing"))
        }
        return (type, value)
    }

    /// An enum field's case, or an error naming the field, its offset and what it may be.
    private static func value<Value: RawRepresentable>(_ field: ProtobufField, _ label: String, _ expected: String) throws(DecodingError) -> Value
    where Value.RawValue == UInt32 {
        let raw = try field.uint32(label)
        guard let value = Value(rawValue: raw) else {
            throw DecodingError(field: label, offset: field.valueOffset, reason: .invalidValue("\(raw) is not \(expected)"))
        }
        return value
    }

    private static func notAMessage(_ field: ProtobufField, _ name: String) -> DecodingError {
        DecodingError(field: name, offset: field.offset, reason: .invalidValue("wire type \(field.wireType.rawValue), expected a message (2)"))
    }

    // MARK: Encoding

    /// The `InitCommand` message: the bytes a signature covers.
    package func encodeInitCommand() -> [UInt8] {
        var initCommand = ProtobufWriter()
        if let firmwareVersion { initCommand.varint(1, UInt64(firmwareVersion)) }
        if let hardwareVersion { initCommand.varint(2, UInt64(hardwareVersion)) }
        initCommand.packed(3, softDeviceRequirements.map(UInt64.init))
        if let type { initCommand.varint(4, UInt64(type.rawValue)) }
        initCommand.varint(5, UInt64(softDeviceSize))
        initCommand.varint(6, UInt64(bootloaderSize))
        initCommand.varint(7, UInt64(applicationSize))
        if let hashType {
            var hashMessage = ProtobufWriter()
            hashMessage.varint(1, UInt64(hashType.rawValue))
            hashMessage.data(2, hash.reversed())
            initCommand.data(8, hashMessage.bytes)
        }
        initCommand.bool(9, isDebug)
        for validation in bootValidation {
            var message = ProtobufWriter()
            message.varint(1, UInt64(validation.type.rawValue))
            message.data(2, validation.bytes)
            initCommand.data(10, message.bytes)
        }
        return initCommand.bytes
    }

    /// A `Command`: op_code INIT, then the init command (last, as the bootloader needs it).
    private static func command(wrapping initCommand: [UInt8]) -> [UInt8] {
        var command = ProtobufWriter()
        command.varint(1, 1)  // INIT
        command.data(2, initCommand)
        return command.bytes
    }

    /// The whole packet: a signed command when a signature is present, a plain command otherwise.
    package func encode() -> [UInt8] {
        var packet = ProtobufWriter()
        if let signatureType {
            var signed = ProtobufWriter()
            signed.data(1, Self.command(wrapping: signedBytes ?? encodeInitCommand()))
            signed.varint(2, UInt64(signatureType.rawValue))
            signed.data(3, signature)
            packet.data(2, signed.bytes)
        } else {
            packet.data(1, Self.command(wrapping: encodeInitCommand()))
        }
        return packet.bytes
    }

    // MARK: Checks

    /// Whether `image` has the hash this packet names. nil when the hash type
    /// is one bleota does not compute (CRC, SHA-128, none: Nordic's bootloaders take SHA-256).
    package func hashMatches(_ image: [UInt8]) -> Bool? {
        switch hashType {
        case .sha256?: SHA256Digest.hash(image) == hash
        case .sha512?: Array(SHA512.hash(data: image)) == hash
        default: nil
        }
    }

    /// Signs the init command with `key` (ECDSA P-256, SHA-256), as `nrfutil pkg generate --key-file` does.
    package mutating func sign(with key: P256.Signing.PrivateKey) throws {
        let initCommand = encodeInitCommand()
        let raw = try key.signature(for: Data(initCommand)).rawRepresentation
        signedBytes = initCommand
        signatureType = .ecdsaP256SHA256
        signature = Array(raw.prefix(32).reversed()) + Array(raw.suffix(32).reversed())
    }

    /// Whether the signature verifies with `key`. nil for an unsigned packet
    /// or a signature type bleota does not check.
    package func signatureVerifies(with key: P256.Signing.PublicKey) -> Bool? {
        guard let signedBytes, signatureType == .ecdsaP256SHA256 else { return nil }
        guard signature.count == 64 else { return false }
        let raw = Array(signature.prefix(32).reversed()) + Array(signature.suffix(32).reversed())
        guard let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: raw) else { return false }
        return key.isValidSignature(ecdsa, for: Data(signedBytes))
    }
}
