import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation

/// Silicon Labs' OTA DFU (EFR32 Series 1 and 2 with the AppLoader; service
/// 1d14d6ee-…) as a registered protocol: `.gbl` files streamed to OTA Data
/// after OTA Control has reset the device into its AppLoader, verified by
/// the AppLoader at the end. Wire format: protocols/silabs-ota.md.
public struct SiliconLabsOTAProtocol: UpdateProtocol {
    public static let name = "silabs-ota"

    public static let gattService = GATTPacketService(
        service: SiliconLabsOTAChannel.service, write: SiliconLabsOTAChannel.data.uuid, notify: SiliconLabsOTAChannel.control.uuid,
        name: "Silicon Labs OTA", channels: SiliconLabsOTAChannel.allCases.map(\.gattChannel))

    public init() {}

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: Self.name, displayName: "Silicon Labs OTA DFU",
            summary: "Silicon Labs' OTA DFU (EFR32 with the AppLoader): reset into the AppLoader, the .gbl file streamed, verified at the end",
            gattServices: [Self.gattService], transports: [.ble, .simulator, .udp], transportsWhenNamed: [.udp],
            imageFormats: ["Gecko Bootloader image (.gbl)"])
    }

    /// The AppLoader boots what it verified as the connection closes: bleota always goes on to it.
    public var capabilities: ProtocolCapabilities { [.flash] }
    public var flashModes: [FlashMode] { [.confirm] }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .packetSize: "bytes per OTA Data write (default: ATT MTU − 3, at most 244)",
            .window: "OTA Data writes between two reads of the OTA version, which pace the stream (default 16; halved after a failed try)",
            .delay: "pause after each write (default none; 2 ms after a failed try, doubling to 40 ms)",
            .retries: "uploads tried from the begin (0x00) (default 4)",
        ]
    }

    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        probe.head.starts(with: [0xEB, 0x17, 0xA6, 0x03]) ? .owns : .refuses
    }

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        guard request.keyPath == nil else {
            throw TransferError(
                .unsupported, step: .load, "--key: GBL signatures are checked by the Gecko bootloader, not by bleota (sign with commander gbl create --sign): drop --key")
        }
        let bytes = try ImageFiles.read(request.path, limit: 16 << 20)
        if let problem = GeckoBootloaderImage.problem(bytes) {
            throw TransferError(.badInput, step: .load, "\(request.path) is not a GBL file an AppLoader takes: \(problem): give the .gbl that commander gbl create made")
        }
        let image = try? GeckoBootloaderImage(decoding: bytes)
        let version = image?.applicationVersion ?? 0
        let label = request.versionLabel ?? "application version \(version)"
        return PreparedImage(
            bytes: bytes, version: label,
            summary: "GBL file, application version \(version), \(bytes.count) bytes" + (image?.isSigned == true ? ", signed" : ""))
    }

    public func makeHost(_ context: HostContext) -> any ProtocolHost { SiliconLabsOTAUpdater(context: context) }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        SiliconLabsOTADevice(
            slotSize: configuration.slotSize,
            initialApplication: GeckoBootloaderImage.sample(Array("factory application".utf8), applicationVersion: 1))
    }
}
