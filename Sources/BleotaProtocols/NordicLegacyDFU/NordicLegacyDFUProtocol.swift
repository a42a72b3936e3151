import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation

/// Nordic's legacy DFU (nRF5 SDK ≤ 11 bootloaders; Adafruit's nRF52
/// bootloader on Feather, ItsyBitsy, CLUE and many other boards) as a
/// registered protocol: packages from `adafruit-nrfutil dfu genpkg` over BLE
/// (service 0x1530) and the simulator; its device half also speaks the
/// HCI/SLIP serial transport that `adafruit-nrfutil dfu serial` uses. Wire
/// format: protocols/nordic-legacy-dfu.md.
public struct NordicLegacyDFUProtocol: UpdateProtocol {
    public static let name = "nordic-legacy"
    static func uuid(_ alias: String) -> BluetoothUUID { BluetoothUUID("0000\(alias)-1212-EFDE-1523-785FEABCD123")! }
    public static let gattService = GATTPacketService(
        service: uuid("1530"), write: uuid("1531"), notify: uuid("1531"), name: "Nordic legacy DFU",
        channels: [
            GATTChannel(
                number: NordicLegacyChannel.controlPoint.rawValue, service: uuid("1530"), characteristic: uuid("1531"),
                write: .request, update: .notify),
            GATTChannel(
                number: NordicLegacyChannel.packet.rawValue, service: uuid("1530"), characteristic: uuid("1532"),
                write: .command, update: .none),
            GATTChannel(
                number: NordicLegacyChannel.revision.rawValue, service: uuid("1530"), characteristic: uuid("1534"),
                write: .none, update: .none, readable: true),
        ])

    public init() {}

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: Self.name, displayName: "Nordic legacy DFU",
            summary: "Nordic's legacy DFU (SDK ≤ 11, Adafruit nRF52 bootloader): adafruit-nrfutil packages",
            gattServices: [Self.gattService], transports: [.ble, .simulator, .serial],
            imageFormats: ["adafruit-nrfutil package (.zip, dfu_version 0.5)"])
    }

    public var capabilities: ProtocolCapabilities { [.flash, .testTransfer] }
    public var testTransferNeedsImage: Bool { true }
    public var flashModes: [FlashMode] { [.confirm] }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .packetSize: "bytes per packet write, a multiple of 4 (default: what the link carries)",
            .window: "packets between receipts (default 10, as Nordic's tools use)",
            .retries: "tries of a part that did not arrive whole (legacy DFU cannot resume; default 3)",
        ]
    }

    /// The simulated device's options.
    enum DeviceOptions {
        static let softDevice = ProtocolOption<UInt16?>.softDevice(
            "legacy-sd", meaning: "legacy bootloader's SoftDevice firmware ID (default 0x00B6, S140 6.1.1; 'none' for no SoftDevice)", default: 0x00B6)
        static let startInBootloader = ProtocolOption.choice(
            "legacy-start", meaning: "where the legacy device starts: application (default) or bootloader", ["application": false, "bootloader": true],
            default: false)
    }

    public var deviceOptions: [DeviceOptionSpec] { [DeviceOptions.softDevice.deviceSpec, DeviceOptions.startInBootloader.deviceSpec] }

    /// A zip is its own only when its manifest says legacy (dfu_version); that needs the file read.
    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        if case .legacy? = NordicDFUPackage.flavour(ofPackageAt: probe.path, head: probe.head) { return .owns }
        return .refuses
    }

    static func imageType(_ partName: String) -> NordicLegacyImageType? {
        switch partName {
        case NordicDFUPackage.PartKind.application.description: .application
        case NordicDFUPackage.PartKind.softDevice.description: .softDevice
        case NordicDFUPackage.PartKind.bootloader.description: .bootloader
        case NordicDFUPackage.PartKind.softDeviceBootloader.description: .softDeviceAndBootloader
        default: nil
        }
    }

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        let (parts, problem) = try load(request)
        if let problem { throw TransferError(.verificationFailed, step: .load, problem) }
        let application = parts.last { $0.0.kind == .application }
        let version = request.versionLabel ?? application.map { $0.1.applicationVersion == 0xFFFF_FFFF ? "unversioned" : String($0.1.applicationVersion) } ?? "unversioned"
        return PreparedImage(
            parts: parts.map { part, _ in
                var attributes: [String: Int] = [:]
                if let size = part.softDeviceSize { attributes["softdevice-size"] = size }
                return PreparedImage.Part(name: part.kind.description, data: part.image, metadata: part.initPacketBytes, attributes: attributes)
            }, version: version, summary: "legacy DFU package: " + parts.map { "\($0.0.kind) \($0.0.image.count) bytes" }.joined(separator: ", "))
    }

    public func describeImage(_ request: ImageRequest) throws(TransferError) -> ImageDescription? {
        guard imageAffinity(ImageFiles.probe(request.path)) == .owns else { return nil }
        let (parts, problem) = try load(request)
        return ImageDescription(
            format: "Nordic legacy DFU package (adafruit-nrfutil)",
            parts: parts.map { part, packet in
                typealias Field = ImageDescription.Field
                let version = packet.applicationVersion
                return ImageDescription.Part(
                    name: part.kind.description,
                    fields: Field.image(file: part.imageName, bytes: part.image) + [
                        .file("init packet", file: part.initPacketName, size: part.initPacketBytes.count),
                        Field("device type", String(format: "0x%04X", packet.deviceType), typed: [("deviceType", .integer(Int64(packet.deviceType)))]),
                        Field("device revision", String(format: "0x%04X", packet.deviceRevision), typed: [("deviceRevision", .integer(Int64(packet.deviceRevision)))]),
                        Field(
                            "application version", version == 0xFFFF_FFFF ? "none (0xFFFFFFFF)" : String(version),
                            typed: [("applicationVersion", .integer(Int64(version)))]),
                        Field(
                            "sd_req", packet.softDeviceRequirements.map { String(format: "0x%04X", $0) }.joined(separator: ", "),
                            typed: [("sdReq", .list(packet.softDeviceRequirements.map { .integer(Int64($0)) }))]),
                        Field("CRC-16", String(format: "0x%04X", packet.imageCRC), typed: [("crc16", .integer(Int64(packet.imageCRC)))]),
                    ], hashMatches: NordicLegacyInitPacket.crc(of: part.image) == packet.imageCRC)
            }, problem: problem)
    }

    func load(_ request: ImageRequest) throws(TransferError) -> ([(NordicDFUPackage.Part, NordicLegacyInitPacket)], String?) {
        if request.keyPath != nil {
            throw TransferError(.unsupported, step: .load, "--key: legacy DFU packages carry no signature bleota can check: drop --key")
        }
        let package: NordicDFUPackage
        do { package = try NordicDFUPackage(contentsOf: request.path) } catch { throw TransferError(.badInput, step: .load, error.description) }
        guard case .legacy = package.flavour else {
            throw TransferError(.badInput, step: .load, "\(request.path) is a Secure DFU package: flash it with --protocol nordic-dfu")
        }
        var parts: [(NordicDFUPackage.Part, NordicLegacyInitPacket)] = []
        var problem: String?
        for part in package.parts {
            let packet: NordicLegacyInitPacket
            do { packet = try NordicLegacyInitPacket(decoding: part.initPacketBytes) } catch {
                throw TransferError(.badInput, step: .load, "\(request.path): the \(part.kind)'s init packet does not decode (\(error)): regenerate the package")
            }
            if problem == nil, NordicLegacyInitPacket.crc(of: part.image) != packet.imageCRC {
                problem = "\(request.path): the \(part.kind)'s CRC-16 does not match its init packet: the image was changed or damaged; regenerate the package"
            }
            if problem == nil, part.image.count % 4 != 0 {
                problem = "\(request.path): the \(part.kind) is \(part.image.count) bytes, not a multiple of 4, which legacy bootloaders refuse: regenerate the package"
            }
            parts.append((part, packet))
        }
        return (parts, problem)
    }

    public func frame(serial lines: any DelimitedByteStream) -> any Link { NordicHCILink(lines: lines) }

    public func makeHost(_ context: HostContext) -> any ProtocolHost { NordicLegacyDFUUpdater(context: context) }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        var flash = NordicLegacyBootloader.Flash()
        flash.softDeviceID = configuration.options[DeviceOptions.softDevice]
        let start = configuration.options[DeviceOptions.startInBootloader]
        flash.applicationVersion = UInt32(configuration.initialVersion.prefix { $0.isNumber }) ?? 1
        flash.application = Array("factory application \(flash.applicationVersion)".utf8)
        flash.slotSize = configuration.slotSize
        return NordicLegacyDFUDevice(flash: flash, startInBootloader: start)
    }
}
