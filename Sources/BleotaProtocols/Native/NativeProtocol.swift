import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation

/// bleota's own protocol (protocols/bleota.md), as a registered protocol:
/// windowed selective repeat with a CRC per packet, resume by image hash, an
/// image activated only after the device verified its CRC-32 and SHA-256.
/// Over BLE (its GATT service, or an LE credit-based channel) and the simulator.
public struct NativeProtocol: UpdateProtocol {
    public static let name = "native"
    /// The GATT service that carries it: packets to the device as Write Without
    /// Response on RX, from it as notifications on TX.
    public static let gattService = GATTPacketService(
        service: BluetoothUUID("B1E07A00-5E1F-4C3B-9A6E-0B1E07A00001")!,
        write: BluetoothUUID("B1E07A00-5E1F-4C3B-9A6E-0B1E07A00002")!,
        notify: BluetoothUUID("B1E07A00-5E1F-4C3B-9A6E-0B1E07A00003")!,
        name: "bleota OTA")

    public init() {}

    /// START carries the image's size in 32 bits.
    static let maximumImage = Int(UInt32.max)

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: Self.name, displayName: "bleota's native protocol",
            summary: "bleota's own: per-packet CRCs, selective resend, resume, verify before activate",
            gattServices: [Self.gattService], transports: [.ble, .creditChannel, .simulator, .udp], transportsWhenNamed: [.udp],
            imageFormats: ["bin", "hex", "srec"])
    }

    public var capabilities: ProtocolCapabilities { [.flash, .push, .pull, .testTransfer, .deltaFlash, .versionCohort] }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .packetSize: "payload bytes per data packet", .window: "data packets in flight before an acknowledgement",
            .delay: "pause after each data packet", .ackInterval: "the device acknowledges every N packets",
            .ackTimeout: "wait for an acknowledgement before asking for one", .retries: "acknowledgement timeouts in a row before giving up",
            .adaptive: "closed-loop pacing from the acknowledgements (on by default)", .compression: "deflate the stream when the device can inflate it",
        ]
    }

    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity { .accepts }

    /// Reads a .bin, .hex or .srec image and flattens it. The native protocol's
    /// images carry no signature of their own: a key can only check an MCUboot
    /// signature the image happens to carry, and is refused otherwise.
    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        if let streamed = try Self.streamedBinary(request) { return streamed }
        let firmware: FirmwareImage
        do {
            let format = request.inputFormat.flatMap(ImageFormat.init(rawValue:))
            var image = try FirmwareImage.load(path: request.path, format: format, limit: Self.maximumImage, maximumSpan: request.maximumSpan)
            if image.format == .bin, request.baseAddress != 0 {
                image = try FirmwareImage(binary: image.flattened(fill: request.fill), baseAddress: request.baseAddress)
            }
            firmware = image
        } catch {
            throw TransferError(.badInput, step: .load, String(describing: error))
        }
        let bytes: [UInt8]
        do {
            bytes = try firmware.flattened(fill: request.fill, limit: Self.maximumImage, fileName: (request.path as NSString).lastPathComponent)
        } catch {
            throw TransferError(.badInput, step: .load, String(describing: error))
        }
        guard !bytes.isEmpty else { throw TransferError(.badInput, step: .load, "\(request.path): the image is empty: nothing to flash") }
        if let keyPath = request.keyPath {
            guard MCUbootImage.startsWithMagic(bytes) else {
                throw TransferError(
                    .unsupported, step: .load,
                    "--key: \(request.path) carries no signature the native protocol could check (it is not an MCUboot image): drop --key, or flash a signed image with a protocol that verifies it"
                )
            }
            _ = try SMPProtocol.prepare(bytes, path: request.path, keyPath: keyPath)
        }
        let label = request.versionLabel ?? "sha256:" + String(SHA256Digest.hash(bytes).hexString.prefix(12))
        return PreparedImage(bytes: bytes, version: label, summary: "\(firmware.format.rawValue) image, \(bytes.count) bytes")
    }

    /// Raw binaries at least this large are read as they are sent, never held whole.
    public static let streamingThreshold = 16 << 20

    /// A large raw binary at address 0, with no key to check: streamed from its file.
    /// Its hashes are taken in one pass here (the device checks them, and the
    /// version label defaults to the SHA-256), then the engine reads it packet by packet.
    static func streamedBinary(_ request: ImageRequest) throws(TransferError) -> PreparedImage? {
        let format = request.inputFormat.flatMap(ImageFormat.init(rawValue:))
        let isBinary = format == .bin || (format == nil && (request.path as NSString).pathExtension.lowercased() == "bin")
        guard isBinary, request.baseAddress == 0, request.keyPath == nil,
            let size = try? InputFile.size(request.path), size >= UInt64(streamingThreshold)
        else { return nil }
        guard size <= UInt64(UInt32.max) else {
            throw TransferError(.badInput, step: .load, "\(request.path) is \(size) bytes; the native protocol carries at most 4 GiB less one byte")
        }
        do {
            let streamed = try PreparedImage.StreamedBytes(file: FileByteSource(path: request.path))
            let label = request.versionLabel ?? "sha256:" + String(streamed.sha256.hexString.prefix(12))
            return PreparedImage(
                parts: [PreparedImage.Part(name: "application", streamed: streamed)], version: label,
                summary: "bin image, \(streamed.count) bytes, sent from the file as it is read")
        } catch {
            throw TransferError(.badInput, step: .load, String(describing: error))
        }
    }

    public func makeHost(_ context: HostContext) -> any ProtocolHost { NativeUpdater(context: context) }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        let storage = DeviceStorage(
            activeImage: Array("factory image".utf8), activeVersion: configuration.initialVersion,
            slotSize: configuration.slotSize)
        storage.withState { $0.files.merge(configuration.files) { _, new in new } }
        return NativeDevice(
            name: configuration.name, storage: storage, bufferCount: configuration.bufferCount,
            maximumPacket: configuration.maximumPacket)
    }
}
