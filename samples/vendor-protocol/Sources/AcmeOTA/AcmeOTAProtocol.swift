import BleotaATT
import BleotaCodec
import BleotaEngine

/// ACME OTA as an ``UpdateProtocol``: its identity, what it can do, what the
/// tuning knobs mean for it, and its two halves. Registering this one value
/// is all bleota needs to flash ACME devices, simulate them and serve them.
public struct AcmeOTAProtocol: UpdateProtocol {
    public static let gattService = GATTPacketService(
        service: BluetoothUUID("AC3E0001-0000-4000-8000-00805F9B34FB")!,
        write: BluetoothUUID("AC3E0002-0000-4000-8000-00805F9B34FB")!,
        notify: BluetoothUUID("AC3E0003-0000-4000-8000-00805F9B34FB")!,
        name: "ACME OTA")

    public init() {}

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: "acme-ota", displayName: "ACME OTA", summary: "ACME's private OTA: START with length and CRC-32, indexed chunks with CRC-16, END, status notifications",
            gattServices: [Self.gattService], transports: [.ble, .simulator], imageFormats: ["bin"])
    }

    public var capabilities: ProtocolCapabilities { [.flash] }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .packetSize: "payload bytes per DATA packet", .window: "DATA packets in flight", .delay: "pause after each DATA packet",
            .ackTimeout: "wait for a STATUS before polling",
        ]
    }

    /// Plain images only; the vendor's bootloader takes raw bytes.
    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity { probe.pathExtension == "bin" ? .accepts : .refuses }

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        guard request.keyPath == nil else {
            throw TransferError(.unsupported, step: .load, "--key: ACME OTA images carry no signature: drop --key")
        }
        let bytes = try ImageFiles.read(request.path)
        guard !bytes.isEmpty else { throw TransferError(.badInput, step: .load, "\(request.path) is empty: nothing to flash") }
        return PreparedImage(
            bytes: bytes, version: request.versionLabel ?? "crc32:" + String(CRC32Text.of(bytes)),
            summary: "ACME image, \(bytes.count) bytes")
    }

    public func makeHost(_ context: HostContext) -> any ProtocolHost { AcmeHost(context: context) }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        AcmeDevice(version: configuration.initialVersion, slotSize: configuration.slotSize)
    }
}

enum CRC32Text {
    static func of(_ bytes: [UInt8]) -> String { String(CRC32.checksum(bytes), radix: 16) }
}
