import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation

/// TI's Over-the-Air Download (SimpleLink BLE5-Stack, CC26x2/CC13x2; service
/// F000FFC0-…) as a registered protocol: OAD images (a 44-byte header with a
/// CRC-32), Image Identify, blocks the device asks for one by one, Enable
/// Image. Off-chip OAD (the application holds the OAD service). Wire format:
/// protocols/ti-oad.md.
public struct TIOADProtocol: UpdateProtocol {
    public static let name = "ti-oad"

    public static let gattService = GATTPacketService(
        service: TIOADChannel.service, write: TIOADChannel.block.uuid, notify: TIOADChannel.control.uuid,
        name: "TI OAD", channels: TIOADChannel.allCases.map(\.gattChannel))

    public init() {}

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: Self.name, displayName: "TI OAD",
            summary: "TI's OAD for SimpleLink BLE5-Stack (CC26x2, CC13x2): Image Identify, blocks the device requests one by one, Enable Image",
            gattServices: [Self.gattService], transports: [.ble, .simulator, .udp], transportsWhenNamed: [.udp],
            imageFormats: ["OAD image (.bin from TI's oad_image_tool)"])
    }

    public var capabilities: ProtocolCapabilities { [.flash] }
    public var flashModes: [FlashMode] { [.confirm] }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .retries: "downloads tried from Image Identify (default 4)",
            .window: "blocks sent ahead of the device's request (default: from 1, one more at each request, to 16; fewer after a try that lost one)",
        ]
    }

    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        probe.head.count >= 8 && TIOADImageHeader.imageIDs.contains(Array(probe.head.prefix(8))) ? .owns : .refuses
    }

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        guard request.keyPath == nil else {
            throw TransferError(.unsupported, step: .load, "--key: OAD images are verified by the BIM on the chip, not by bleota: drop --key")
        }
        let bytes = try ImageFiles.read(request.path, limit: 1 << 20)
        if let problem = TIOADImageHeader.problem(bytes) {
            throw TransferError(.badInput, step: .load, "\(request.path) is not an OAD image: \(problem): give the _oad.bin TI's oad_image_tool made")
        }
        let label = request.versionLabel ?? String(decoding: bytes[32..<36], as: UTF8.self)
        return PreparedImage(bytes: bytes, version: label, summary: "OAD image \(label), \(bytes.count) bytes")
    }

    public func makeHost(_ context: HostContext) -> any ProtocolHost { TIOADUpdater(context: context) }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        TIOADDevice(
            slotSize: configuration.slotSize, maximumPacket: configuration.maximumPacket,
            initialImage: TIOADImageHeader.sample(Array("factory application".utf8), softwareVersion: "0001"))
    }
}
