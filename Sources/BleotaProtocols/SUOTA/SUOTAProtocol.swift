import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation

/// Dialog/Renesas SUOTA 1.3 (service 0xFEF5; DA1469x, DA1468x, DA1458x) over
/// GATT, as a registered protocol: `mkimage` images ("Qq" header, CRC-32 of
/// the code) sent in blocks of PATCH_LEN, each acknowledged; END verifies,
/// REBOOT activates. Wire format: protocols/suota.md.
public struct SUOTAProtocol: UpdateProtocol {
    public static let name = "suota"

    public static let gattService = GATTPacketService(
        service: SUOTAChannel.service, write: SUOTAChannel.patchData.uuid, notify: SUOTAChannel.status.uuid,
        name: "Dialog SUOTA", channels: SUOTAChannel.allCases.map(\.gattChannel),
        creditChannel: CreditChannelRoute(channel: SUOTAChannel.creditData, psmChannel: SUOTAChannel.l2capPSM.rawValue))

    public init() {}

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: Self.name, displayName: "Dialog SUOTA",
            summary: "Dialog/Renesas SUOTA 1.3 (DA1469x images): blocks of PATCH_LEN acknowledged one by one, CRC-32 at END, REBOOT",
            gattServices: [Self.gattService], transports: [.ble, .simulator, .udp], transportsWhenNamed: [.udp],
            imageFormats: ["DA1469x mkimage image (.img, .bin)"])
    }

    /// The device activates at REBOOT after END verified: bleota always goes on to REBOOT.
    public var capabilities: ProtocolCapabilities { [.flash] }
    public var flashModes: [FlashMode] { [.confirm] }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .packetSize: "bytes per PATCH_DATA write (default: PATCH_DATA_CHAR_SIZE, or 20 without SUOTA 1.3)",
            .window: "PATCH_DATA writes per block, which PATCH_LEN announces (default 6; halved after a failed try)",
            .delay: "pause after each write (default none; 2 ms after a failed try, doubling to 40 ms)",
            .retries: "uploads tried (default 4)",
        ]
    }

    /// The host's options.
    enum HostOptions {
        /// Where the image goes; nil: the credit-based channel when the device publishes one.
        static let transport = ProtocolOption<TransportKind?>.choice(
            "suota-transport",
            meaning: "gatt to send the image in PATCH_DATA writes even where the device publishes an L2CAP PSM (default: its credit-based channel when it does)",
            ["gatt": .ble, "l2cap": .creditChannel], default: nil, noun: "a transport")
    }

    public var hostOptions: [HostOptionSpec] { [HostOptions.transport.hostSpec] }

    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        probe.head.starts(with: SUOTAImageHeader.signature) && ["img", "bin"].contains(probe.pathExtension) ? .owns : .refuses
    }

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        guard request.keyPath == nil else {
            throw TransferError(.unsupported, step: .load, "--key: SUOTA images carry no signature bleota checks (secure images are verified by the chip): drop --key")
        }
        let bytes = try ImageFiles.read(request.path, limit: 16 << 20)
        if let problem = SUOTAImageHeader.problem(bytes) {
            throw TransferError(.badInput, step: .load, "\(request.path) is not a DA1469x SUOTA image: \(problem)")
        }
        let version = (try? SUOTAImageHeader(decoding: bytes))?.version ?? ""
        let label = request.versionLabel ?? (version.isEmpty ? "sha256:" + String(SHA256Digest.hash(bytes).hexString.prefix(12)) : version)
        return PreparedImage(bytes: bytes, version: label, summary: "DA1469x image \(version), \(bytes.count) bytes")
    }

    public func makeHost(_ context: HostContext) -> any ProtocolHost { SUOTAUpdater(context: context) }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        SUOTADevice(
            partitionSize: configuration.slotSize,
            initialImage: SUOTAImageHeader.sample(Array("factory application".utf8), version: configuration.initialVersion))
    }
}
