import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation

/// Espressif's BLE OTA (esp-iot-solution `ble_ota`, `ble_ota_raw`; service
/// 0x8018) as a registered protocol: ESP-IDF application images sent in 4 KiB
/// sectors with a CRC-16 each, acknowledged per sector. Wire format:
/// protocols/espressif-ota.md.
public struct EspressifOTAProtocol: UpdateProtocol {
    public static let name = "espressif-ota"

    public static let gattService = GATTPacketService(
        service: EspressifOTAChannel.service, write: EspressifOTAChannel.firmware.uuid, notify: EspressifOTAChannel.firmware.uuid,
        name: "Espressif BLE OTA", channels: EspressifOTAChannel.allCases.map(\.gattChannel))

    public init() {}

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: Self.name, displayName: "Espressif BLE OTA",
            summary: "esp-iot-solution's BLE OTA (ESP32, -C3, -S3, -C6, -H2): 4 KiB sectors with a CRC-16, acknowledged per sector",
            gattServices: [Self.gattService], transports: [.ble, .simulator, .udp], transportsWhenNamed: [.udp],
            imageFormats: ["ESP-IDF application (.bin)"])
    }

    /// The device activates an image as soon as its last byte arrives: no test boot, no upload without activation.
    /// Delta patches with `--base`: the device applies `esp_delta_ota` patches (protocols/delta.md).
    public var capabilities: ProtocolCapabilities { [.flash, .deltaFlash] }
    public var flashModes: [FlashMode] { [.confirm] }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .packetSize: "data bytes per firmware packet (default: what the link carries, less the 3-byte header)",
            .window: "sectors sent before waiting for their acknowledgements (default: the window the device announces in START's acknowledgement, 1 if none; at most 64)",
            .ackTimeout: "wait for a sector acknowledgement before sending again from the first one missing",
            .retries: "connections tried when the link drops (the device starts over at each; default 4)",
        ]
    }

    /// The simulated device's options.
    enum DeviceOptions {
        static let window = ProtocolOption<UInt8>.number(
            "esp-window",
            meaning: "Espressif device's sector send window announced in START's acknowledgement (1…64, default 3; 0 for a legacy device that announces none)",
            default: 3, range: 0...64)
    }

    public var deviceOptions: [DeviceOptionSpec] { [DeviceOptions.window.deviceSpec] }

    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        probe.pathExtension == "bin" && probe.head.first == ESPAppImage.magic && probe.head.count > 23 ? .owns : .refuses
    }

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        guard request.keyPath == nil else {
            throw TransferError(.unsupported, step: .load, "--key: secure-boot signatures are checked by the ESP32 itself, not by bleota: drop --key")
        }
        let bytes = try ImageFiles.read(request.path, limit: 16 << 20)
        if let problem = ESPAppImage.problem(bytes) {
            throw TransferError(.badInput, step: .load, "\(request.path) is not an ESP-IDF application image: \(problem): give the .bin that idf.py build writes")
        }
        let label = request.versionLabel ?? "sha256:" + String(SHA256Digest.hash(bytes).hexString.prefix(12))
        return PreparedImage(bytes: bytes, version: label, summary: "ESP-IDF application image, \(bytes.count) bytes")
    }

    public func makeHost(_ context: HostContext) -> any ProtocolHost { EspressifOTAUpdater(context: context) }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        let window = configuration.options[DeviceOptions.window]
        return EspressifOTADevice(
            partitionSize: configuration.slotSize, window: window,
            initialImage: ESPAppImage.sample(Array("factory application \(configuration.initialVersion)".utf8)))
    }
}
