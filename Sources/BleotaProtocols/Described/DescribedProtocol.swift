import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation

/// A protocol read from a description file (``ProtocolDescription``), as a
/// registered protocol: `bleota flash IMAGE --protocol-file my-ota.yaml`
/// flashes with it, `sim://…?protocol-file=my-ota.yaml` and `bleota sim serve
/// --protocol-file` simulate a device from the same file, and `bleota serve`
/// offers its service over a real adapter.
public struct DescribedProtocol: UpdateProtocol {
    public let description: ProtocolDescription

    public init(_ description: ProtocolDescription) {
        self.description = description
    }

    /// Reads the description at `path` (errors name the line and field).
    public init(contentsOf path: String) throws(ProtocolDescriptionError) {
        self.init(try ProtocolDescription(contentsOf: path))
    }

    public var gattService: GATTPacketService {
        let packet = description.message(description.transfer.packet)
        let data = description.characteristics[Int(packet.channel)]
        let notifying = description.characteristics.first { $0.update != .none } ?? data
        return GATTPacketService(
            service: description.service, write: data.uuid, notify: notifying.uuid,
            name: description.displayName, channels: description.gattChannels)
    }

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: description.name, displayName: description.displayName,
            summary: description.summary + " (described in \((description.source as NSString).lastPathComponent))",
            gattServices: [gattService], transports: [.ble, .simulator, .udp], transportsWhenNamed: [.udp],
            imageFormats: description.image.formats)
    }

    /// Test transfers (`tune`) only where a separate activate step lets bleota stop before
    /// activation: a device whose end command activates would be updated by a measurement.
    public var capabilities: ProtocolCapabilities { description.update.activate == nil ? [.flash] : [.flash, .testTransfer] }

    /// A described device takes only images: a test transfer sends one and stops before activating.
    public var testTransferNeedsImage: Bool { true }

    public var flashModes: [FlashMode] { [.confirm] }

    public var tuningKnobs: [TuningKnob: String] {
        var knobs: [TuningKnob: String] = [
            .delay: "pause after each data packet (default none; a try that lost packets adds 5 ms when the flow has no other pacing)",
            .retries: "tries of the whole upload when packets went missing (default 4)",
        ]
        if description.transfer.payloadSize == nil { knobs[.packetSize] = "image bytes per data packet (default: what the link carries)" }
        switch description.transfer.flow {
        case .none(let every?, _): knobs[.window] = "packets between reads that pace the sending (default \(every), halved after a failed try)"
        case .acknowledged(_, let every):
            knobs[.window] = "packets in flight before an acknowledgement (at least \(every); default \(2 * every))"
            knobs[.ackTimeout] = "wait for an acknowledgement before sending again from the last one"
        default: break
        }
        return knobs
    }

    /// The host's options.
    enum HostOptions {
        static let version = ProtocolOption<UInt64>.number(
            "version", meaning: "the number sent as the image's version where the description's commands carry one (default 0)", default: 0)
    }

    public var hostOptions: [HostOptionSpec] { [HostOptions.version.hostSpec] }

    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        let formats = Set(description.image.formats)
        switch probe.pathExtension {
        case "bin": return formats.contains("bin") ? .accepts : .refuses
        case "hex", "ihex": return formats.contains("hex") ? .accepts : .refuses
        case "srec", "s19", "mot": return formats.contains("srec") ? .accepts : .refuses
        case "elf": return formats.contains("elf") ? .accepts : .refuses
        default: return .refuses
        }
    }

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        let bytes: [UInt8]
        let format: ImageFormat
        do {
            let image = try FirmwareImage.load(
                path: request.path, format: request.inputFormat.flatMap(ImageFormat.init(rawValue:)), limit: 1 << 28, maximumSpan: request.maximumSpan)
            format = image.format
            bytes = try image.flattened(fill: request.fill, limit: 1 << 28, fileName: (request.path as NSString).lastPathComponent)
        } catch {
            throw TransferError(.badInput, step: .load, String(describing: error))
        }
        guard description.image.formats.contains(format.rawValue) else {
            throw TransferError(
                .badInput, step: .load,
                "\(request.path) is a \(format.rawValue) image, which \(description.displayName) does not take: give a \(description.image.formats.joined(separator: " or ")) image (image.formats)"
            )
        }
        guard request.keyPath == nil else {
            throw TransferError(.unsupported, step: .load, "--key: \(description.displayName) carries no signature bleota could check: drop --key")
        }
        guard !bytes.isEmpty else { throw TransferError(.badInput, step: .load, "\(request.path): the image is empty: nothing to flash") }
        for check in description.image.checks {
            if let problem = check.problem(bytes) {
                throw TransferError(
                    .badInput, step: .load,
                    "\(request.path) is not an image a \(description.displayName) device boots: \(problem) (image.checks): build it with the vendor's tools")
            }
        }
        let label = request.versionLabel ?? "sha256:" + String(SHA256Digest.hash(bytes).hexString.prefix(12))
        return PreparedImage(bytes: bytes, version: label, summary: "\(format.rawValue) image, \(bytes.count) bytes")
    }

    public func makeHost(_ context: HostContext) -> any ProtocolHost { DescribedUpdater(description: description, context: context) }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        let factory = description.image.sample(Array("factory image of \(description.name) \(configuration.initialVersion)".utf8))
        return DescribedDevice(description: description, slotSize: configuration.slotSize, initialImage: factory)
    }
}
