import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import Crypto
import Foundation

/// Nordic's Secure DFU (nRF5 SDK 12–17 bootloaders, service 0xFE59) as a
/// registered protocol: packages from `nrfutil pkg generate` (or an image
/// with its `.dat` beside it), the buttonless jump, objects with CRC checks
/// and resume; over BLE, the simulator and a serial port (SLIP, as
/// `nrfutil dfu serial` speaks it). Wire format: protocols/nordic-dfu.md.
public struct NordicSecureDFUProtocol: UpdateProtocol {
    public static let name = "nordic-dfu"

    /// The bootloader's service; the application's buttonless service has the same UUID.
    public static let gattService = GATTPacketService(
        service: NordicDFUChannel.service, write: NordicDFUChannel.controlPoint.uuid,
        notify: NordicDFUChannel.controlPoint.uuid, name: "Nordic Secure DFU",
        channels: NordicDFUChannel.allCases.map(\.gattChannel))

    public init() {}

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: Self.name, displayName: "Nordic Secure DFU",
            summary: "Nordic's Secure DFU bootloader (nRF5 SDK 12–17): nrfutil packages, buttonless jump, signed init packets",
            gattServices: [Self.gattService], transports: [.ble, .simulator, .serial],
            imageFormats: ["nrfutil package (.zip)", "bin or hex with its .dat beside it"])
    }

    public var capabilities: ProtocolCapabilities { [.flash, .testTransfer] }

    public var testTransferNeedsImage: Bool { true }

    /// The bootloader activates an image once its last object executes: there is no test boot and no staging.
    public var flashModes: [FlashMode] { [.confirm] }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .packetSize: "bytes per packet write (default: what the link carries; over serial what the bootloader's MTU allows)",
            .window:
                "packets between receipt notifications, which pace the sending (PRN; default: one object's packets, so the receipt for its last packet is its checksum; halved when an object arrives damaged)",
            .delay: "pause before the first data object of each connection (default 400 ms: SDK 15–17 bootloaders prepare flash then)",
            .retries: "tries of an object whose CRC disagrees (default 3)",
        ]
    }

    /// The simulated device's options.
    enum DeviceOptions {
        static let hardwareVersion = ProtocolOption<UInt32>.number(
            "nordic-hw", meaning: "Nordic device's hardware version (NRF_DFU_HW_VERSION, default 52)", default: 52)
        static let softDevice = ProtocolOption<UInt16?>.softDevice(
            "nordic-sd", meaning: "Nordic device's SoftDevice firmware ID (default 0x0101, S132 7.2.0; 'none' for no SoftDevice)", default: 0x0101)
        /// A path: the key is read from it when the device is made.
        static let keyFile = ProtocolOption.text(
            "nordic-key",
            meaning: "public key file (PEM or DER, or the private key) the Nordic bootloader requires signatures from; without it signatures are not checked")
        static let bootloaderVersion = ProtocolOption<UInt32>.number("nordic-bootloader", meaning: "Nordic bootloader's version (default 1)", default: 1)
        static let buttonless = ProtocolOption.choice(
            "nordic-buttonless", meaning: "Nordic application's buttonless service: unbonded (default), bonded, experimental (SDK 12) or none",
            ["unbonded": NordicSecureDFUDevice.Buttonless.unbonded, "bonded": .bonded, "experimental": .experimental, "none": .none], default: .unbonded,
            noun: "a buttonless kind")
        static let startInBootloader = ProtocolOption.choice(
            "nordic-start", meaning: "where the Nordic device starts: application (default) or bootloader", ["application": false, "bootloader": true],
            default: false)
        static let savesProgress = ProtocolOption.choice(
            "nordic-save-progress",
            meaning: "1: the Nordic bootloader keeps data progress across disconnects (NRF_DFU_SAVE_PROGRESS_IN_FLASH; default 0)", ["0": false, "1": true],
            default: false)
        static let serialMTU = ProtocolOption<UInt32>.number(
            "nordic-serial-mtu", meaning: "Nordic serial bootloader's MTU (Get MTU; default 131, UART; 2051 for USB CDC)", default: 131, range: 16...4096)
    }

    public var deviceOptions: [DeviceOptionSpec] {
        [
            DeviceOptions.hardwareVersion.deviceSpec, DeviceOptions.softDevice.deviceSpec, DeviceOptions.keyFile.deviceSpec,
            DeviceOptions.bootloaderVersion.deviceSpec, DeviceOptions.buttonless.deviceSpec, DeviceOptions.startInBootloader.deviceSpec,
            DeviceOptions.savesProgress.deviceSpec, DeviceOptions.serialMTU.deviceSpec,
        ]
    }

    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        if NordicDFUPackage.startsLikePackage(probe.head) {
            switch NordicDFUPackage.flavour(ofPackageAt: probe.path, head: probe.head) {
            // A legacy package (dfu_version in its manifest) is not this protocol's.
            case .legacy?: return .refuses
            case .secure?: return .owns
            // A zip that does not read as a Nordic package is this protocol's to name what is wrong
            // with, unless its manifest is another tool's (nRF Connect SDK's has no "manifest" object).
            case nil: return NordicDFUPackage.hasForeignManifest(at: probe.path) ? .refuses : .owns
            }
        }
        guard let initPath = Self.initPacketPath(beside: probe.path), FileManager.default.fileExists(atPath: initPath) else { return .refuses }
        switch Self.initPacket(at: initPath, beside: probe.path) {
        case .forThisImage: return .owns
        // adafruit-nrfutil's packages unzip to the same app.bin + app.dat, but that .dat is a
        // legacy init packet (device type, revision, version, sd_req, CRC-16), not protobuf.
        case .legacy: return .refuses
        // A file that only shares the image's name (a data file, another build's init packet):
        // the image is plain bytes here, read with the .dat only when this protocol is named or
        // the device offers it, and then refused with what is wrong with the .dat.
        case .other: return .accepts
        }
    }

    /// The most an init packet takes (`load` reads no more of a `.dat`).
    static let initPacketLimit = 4096

    /// What the `.dat` beside a plain image is to this protocol.
    enum InitPacketBeside: Equatable {
        /// A Secure DFU init packet for an image of exactly this one's size: read with it. A hash
        /// that then differs is refused as the image changed or damaged, not flashed as plain bytes.
        case forThisImage
        /// A legacy DFU init packet, which goes in an adafruit-nrfutil package.
        case legacy
        /// Anything else: why, as words that follow "it is".
        case other(String)
    }

    /// Reads at most the init packet's limit of `initPath` and, when it decodes, the size of the
    /// image at `path` (a HEX file parsed, not flattened): enough to tell whose it is.
    static func initPacket(at initPath: String, beside path: String) -> InitPacketBeside {
        let bytes: [UInt8]
        do { bytes = try InputFile.prefix(initPath, count: initPacketLimit + 1) } catch { return .other("unreadable (\(error))") }
        guard bytes.count <= initPacketLimit else { return .other("more than \(initPacketLimit) bytes, larger than any init packet") }
        if let packet = try? NordicInitPacket(decoding: bytes), packet.type != nil {
            let size: Int?
            if ImageFormat(pathExtension: path) == .bin {
                size = (try? InputFile.size(path)).map { Int(clamping: $0) }
            } else {
                size = (try? FirmwareImage.load(path: path, limit: NordicDFUPackage.maximumMemberSize))?.size
            }
            guard let size, UInt64(size) == packet.imageSize else {
                return .other("the init packet of an image of \(packet.imageSize) bytes, not of this one\(size.map { " (\($0) bytes)" } ?? "")")
            }
            return .forThisImage
        }
        if (try? NordicLegacyInitPacket(decoding: bytes)) != nil { return .legacy }
        return .other("not a Secure DFU init packet")
    }

    /// Said at info level when another protocol carries a plain image that has a `.dat` beside it.
    public func unreadCompanion(of probe: ImageProbe) -> String? {
        guard !NordicDFUPackage.startsLikePackage(probe.head), let initPath = Self.initPacketPath(beside: probe.path),
            FileManager.default.fileExists(atPath: initPath)
        else { return nil }
        let why: String
        switch Self.initPacket(at: initPath, beside: probe.path) {
        case .forThisImage: why = "its Secure DFU init packet, which only Nordic Secure DFU sends (--protocol \(Self.name))"
        case .legacy: why = "a legacy DFU init packet, which goes in the adafruit-nrfutil package (.zip) with the image"
        case .other(let what): why = "\(what) (--protocol \(Self.name) would read it)"
        }
        return "\(initPath) beside \(probe.path) is not read: it is \(why)"
    }

    /// `app.bin` → `app.dat`.
    static func initPacketPath(beside path: String) -> String? {
        // As the user wrote the image's path (relative stays relative): messages name it.
        guard ["bin", "hex", "ihex"].contains((path as NSString).pathExtension.lowercased()) else { return nil }
        return (path as NSString).deletingPathExtension + ".dat"
    }

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        let (parts, problem) = try load(request)
        if let problem { throw TransferError(.verificationFailed, step: .load, problem) }
        let prepared = parts.map { PreparedImage.Part(name: $0.name, data: $0.image, metadata: $0.initBytes) }
        let application = parts.last { $0.packet.type == .application || $0.packet.type == .externalApplication } ?? parts.last!
        let version = request.versionLabel ?? application.packet.firmwareVersion.map(String.init) ?? "unknown"
        let summary = parts.map { "\($0.name) \($0.image.count) bytes" }.joined(separator: ", ")
        return PreparedImage(parts: prepared, version: version, summary: "Nordic DFU package: \(summary)")
    }

    public func describeImage(_ request: ImageRequest) throws(TransferError) -> ImageDescription? {
        guard imageAffinity(ImageFiles.probe(request.path)) == .owns else { return nil }
        let (parts, problem) = try load(request)
        let described = parts.map { part in
            let packet = part.packet
            typealias Field = ImageDescription.Field
            var fields = Field.image(file: part.imageName, bytes: part.image)
            fields.append(.file("init packet", file: part.initName, size: part.initBytes.count))
            fields.append(
                Field(
                    "type", packet.type.map(\.description) ?? "missing",
                    typed: [("type", packet.type.map { .text($0.description) } ?? .missing)]))
            fields.append(
                Field(
                    "firmware version", packet.firmwareVersion.map { $0 == 0xFFFF_FFFF ? "none (0xFFFFFFFF)" : String($0) } ?? "missing",
                    typed: [("firmwareVersion", packet.firmwareVersion.map { .integer(Int64($0)) } ?? .missing)]))
            fields.append(Field("hardware version", integer: packet.hardwareVersion.map(Int64.init)))
            fields.append(
                Field(
                    "sd_req", packet.softDeviceRequirements.map { "0x" + String(format: "%04X", $0) }.joined(separator: ", "),
                    typed: [("sdReq", .list(packet.softDeviceRequirements.map { .integer(Int64($0)) }))]))
            fields.append(
                Field(
                    "sizes", "SoftDevice \(packet.softDeviceSize), bootloader \(packet.bootloaderSize), application \(packet.applicationSize)",
                    typed: [
                        ("softDeviceSize", .integer(Int64(packet.softDeviceSize))), ("bootloaderSize", .integer(Int64(packet.bootloaderSize))),
                        ("applicationSize", .integer(Int64(packet.applicationSize))),
                    ]))
            fields.append(
                Field(
                    "hash type", packet.hashType.map(\.description) ?? "missing",
                    typed: [("hashType", packet.hashType.map { .text($0.description) } ?? .missing)]))
            if packet.isDebug { fields.append(Field("debug", "yes (release bootloaders ignore it)", typed: [("debug", .flag(true))])) }
            fields.append(
                Field(
                    "signed", packet.signedBytes == nil ? "no" : "yes, ECDSA P-256",
                    typed: [("signed", .flag(packet.signedBytes != nil))]))
            return ImageDescription.Part(
                name: part.name, fields: fields, hashMatches: packet.hashMatches(part.image),
                signatureVerified: part.signatureVerified)
        }
        return ImageDescription(format: "Nordic Secure DFU package", parts: described, problem: problem)
    }

    struct LoadedPart {
        var name: String
        var imageName: String
        var initName: String
        var image: [UInt8]
        var initBytes: [UInt8]
        var packet: NordicInitPacket
        var signatureVerified: Bool?
    }

    /// Reads a package (or an image and its `.dat`) and checks each part: the
    /// first problem found is returned as one line, for `flash` to refuse and
    /// `image info` to report.
    func load(_ request: ImageRequest) throws(TransferError) -> ([LoadedPart], String?) {
        var parts: [LoadedPart] = []
        let path = request.path
        if NordicDFUPackage.startsLikePackage(ImageFiles.probe(path).head) {
            let package: NordicDFUPackage
            do { package = try NordicDFUPackage(contentsOf: path) } catch {
                throw TransferError(.badInput, step: .load, error.description)
            }
            guard package.flavour == .secure else {
                throw TransferError(
                    .badInput, step: .load,
                    "\(path) is a legacy DFU package (adafruit-nrfutil, dfu_version in its manifest): flash it with a legacy DFU bootloader's protocol, or regenerate it with nrfutil pkg generate"
                )
            }
            for part in package.parts {
                guard let packet = part.initPacket else {
                    throw TransferError(.badInput, step: .load, "\(path): the \(part.kind) has no init packet")
                }
                parts.append(
                    LoadedPart(
                        name: part.kind.description, imageName: part.imageName, initName: part.initPacketName,
                        image: part.image, initBytes: part.initPacketBytes, packet: packet))
            }
        } else {
            guard let datPath = Self.initPacketPath(beside: path) else {
                throw TransferError(.badInput, step: .load, "\(path) is neither an nrfutil package (.zip) nor a .bin or .hex with its .dat beside it")
            }
            guard FileManager.default.fileExists(atPath: datPath) else {
                // The .dat is a file bleota looked for, not one the user named: say so.
                throw TransferError(
                    .badInput, step: .load,
                    "no init packet for \(path): a Nordic Secure DFU image needs its nrfutil package (.zip), or its .dat beside it (looked for \(datPath))")
            }
            let initBytes = try ImageFiles.read(datPath, limit: 4096)
            let packet: NordicInitPacket
            do { packet = try NordicInitPacket(decoding: initBytes) } catch {
                throw TransferError(.badInput, step: .load, "\(datPath) is not a Secure DFU init packet (\(error)): give the .dat nrfutil made for this image")
            }
            let image: [UInt8]
            do {
                let format = request.inputFormat.flatMap(ImageFormat.init(rawValue:))
                image = try FirmwareImage.load(path: path, format: format, limit: NordicDFUPackage.maximumMemberSize, maximumSpan: request.maximumSpan)
                    .flattened(fill: request.fill, limit: NordicDFUPackage.maximumMemberSize, fileName: (path as NSString).lastPathComponent)
            } catch {
                throw TransferError(.badInput, step: .load, String(describing: error))
            }
            let name = packet.type.map(\.description) ?? "application"
            parts.append(
                LoadedPart(
                    name: name, imageName: (path as NSString).lastPathComponent, initName: (datPath as NSString).lastPathComponent,
                    image: image, initBytes: initBytes, packet: packet))
        }
        var key: P256.Signing.PublicKey?
        if let keyPath = request.keyPath {
            key = try Self.publicKey(at: keyPath)
        }
        var problem: String?
        for index in parts.indices {
            let part = parts[index]
            let packet = part.packet
            if problem == nil, Int(packet.imageSize) != part.image.count {
                problem = "\(path): the \(part.name)'s init packet says \(packet.imageSize) bytes but its image has \(part.image.count): regenerate the package"
            }
            switch packet.hashMatches(part.image) {
            case true?: break
            case false?:
                if problem == nil { problem = "\(path): the \(part.name) does not match the hash in its init packet: the image was changed or damaged; regenerate the package" }
            case nil:
                if problem == nil {
                    problem =
                        "\(path): the \(part.name)'s init packet has a \(packet.hashType?.description ?? "missing") hash, which Secure DFU bootloaders refuse: generate it with SHA-256"
                }
            }
            if let key {
                if packet.signedBytes == nil {
                    if problem == nil {
                        problem =
                            "\(path): the \(part.name)'s init packet is not signed, so --key has nothing to verify: sign the package (nrfutil pkg generate --key-file) or drop --key"
                    }
                } else {
                    let verified = packet.signatureVerifies(with: key) == true
                    parts[index].signatureVerified = verified
                    if !verified, problem == nil {
                        problem = "\(path): the \(part.name)'s signature does not verify with \(request.keyPath ?? "the key"): it was signed with another key"
                    }
                }
            }
        }
        return (parts, problem)
    }

    /// An ECDSA P-256 public key from a file: PEM or DER, public or the private key it belongs to.
    static func publicKey(at path: String) throws(TransferError) -> P256.Signing.PublicKey {
        let bytes = try ImageFiles.read(path, limit: 64 * 1024)
        do {
            guard case .p256(let der) = try MCUbootPublicKey(bytes),
                let key = try? P256.Signing.PublicKey(derRepresentation: der)
            else {
                throw TransferError(.badInput, step: .load, "\(path): Nordic packages are signed with ECDSA P-256, and this is another kind of key")
            }
            return key
        } catch let error as TransferError {
            throw error
        } catch {
            throw TransferError(.badInput, step: .load, "\(path): \(error)")
        }
    }

    public func frame(serial lines: any DelimitedByteStream) -> any Link { NordicSerialLink(lines: lines) }

    /// The host's options.
    enum HostOptions {
        static let bootloaderName = ProtocolOption.text(
            "bootloader-name", meaning: "the name the bootloader advertises after an unbonded buttonless jump (1–20 characters); bleota then finds it by that name")
    }

    public var hostOptions: [HostOptionSpec] { [HostOptions.bootloaderName.hostSpec] }

    public func makeHost(_ context: HostContext) -> any ProtocolHost {
        // Any text is a value of it: the updater checks its length where it sends it.
        NordicSecureDFUUpdater(context: context, bootloaderName: context.options[HostOptions.bootloaderName])
    }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        var flash = NordicBootloader.Flash()
        flash.hardwareVersion = configuration.options[DeviceOptions.hardwareVersion]
        flash.softDeviceID = configuration.options[DeviceOptions.softDevice]
        flash.bootloaderVersion = configuration.options[DeviceOptions.bootloaderVersion]
        if let path = configuration.options[DeviceOptions.keyFile] {
            do { flash.publicKey = try Self.publicKey(at: path) } catch { throw DeviceConfigurationError(key: DeviceOptions.keyFile.key, error.message) }
        }
        flash.savesDataProgress = configuration.options[DeviceOptions.savesProgress]
        let buttonless = configuration.options[DeviceOptions.buttonless]
        let startInBootloader = configuration.options[DeviceOptions.startInBootloader]
        let mtu = configuration.options[DeviceOptions.serialMTU]
        // The application's version: the number the version starts with ("3" or "3.0.0" → 3).
        flash.applicationVersion = UInt32(configuration.initialVersion.prefix { $0.isNumber }) ?? 1
        flash.application = Array("factory application \(flash.applicationVersion)".utf8)
        flash.slotSize = configuration.slotSize
        return NordicSecureDFUDevice(flash: flash, buttonless: buttonless, startInBootloader: startInBootloader, serialMTU: UInt16(mtu))
    }
}
