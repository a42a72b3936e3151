import BleotaATT
import BleotaCodec
import BleotaEngine
import Foundation

/// An update protocol of the "control point + data stream" family, described
/// in a file rather than written in Swift: the service and characteristics,
/// each message as a byte template, the data packet's layout, flow control,
/// and the device's rules. ``DescribedProtocol`` runs a description as a host
/// half and as a simulated device half, so an engineer can test a private
/// protocol against the simulator before touching hardware.
///
/// Read from YAML by ``init(yaml:source:)``; the format is documented in
/// `protocols/description-format.md`, and `protocols/telink-ota.yaml` and
/// `protocols/stm32wb-ota.yaml` are two real protocols written this way.
public struct ProtocolDescription: Sendable {
    /// The name for `--protocol` and `sim://…?protocol=`.
    public var name: String
    public var displayName: String
    public var summary: String
    /// The chips whose SDKs speak it, for `bleota protocols` and the README's table.
    public var chips: [String]
    /// The GATT service the device offers it through.
    public var service: BluetoothUUID
    /// In declaration order; a characteristic's channel number is its position.
    public var characteristics: [Characteristic]
    /// Named byte templates, host → device and device → host.
    public var messages: [String: MessageTemplate]
    public var image: ImageRules
    public var update: UpdateSteps
    public var transfer: TransferRules
    public var statuses: StatusTable
    /// The file it was read from, for messages.
    public var source: String

    /// One characteristic of the service.
    public struct Characteristic: Sendable, Hashable {
        public var name: String
        public var uuid: BluetoothUUID
        public var write: GATTChannel.Write
        public var update: GATTChannel.Update
        public var readable: Bool
        /// Where the firmware offers it: the application, the bootloader, or both.
        public var offeredIn: Set<DeviceRole>
    }

    /// Which firmware a characteristic or behaviour belongs to.
    public enum DeviceRole: String, Sendable, Hashable, CaseIterable {
        case application, bootloader
    }

    /// How the image file becomes the bytes sent.
    ///
    /// ``sample(_:)`` builds an image that passes ``checks`` around any bytes:
    /// the simulated device's factory image, and test images.
    public struct ImageRules: Sendable, Hashable {
        /// File formats it takes, as bleota's image loader names them.
        public var formats: [String]
        /// Pad the image with ``fill`` to a multiple of this many bytes (1: no padding).
        public var align: Int
        public var fill: UInt8
        /// The largest image the device takes; nil when only its slot limits it.
        public var maximumSize: Int?
        /// Checks the firmware itself makes on the image (bleota makes them too, before sending).
        public var checks: [ImageCheck]

        /// `content` made into an image these checks accept: markers written in
        /// place, the magic appended and pointed to, the size field set, the CRC appended.
        public func sample(_ content: [UInt8]) -> [UInt8] {
            var image = content
            let reach =
                checks.map { check -> Int in
                    switch check {
                    case .marker(let at, let bytes): at + bytes.count
                    case .sizeAt(let at), .magicPointer(let at, _, _): at + 4
                    case .crc32Suffix: 0
                    }
                }.max() ?? 0
            if image.count < reach { image += repeatElement(fill, count: reach - image.count) }
            func put(_ value: UInt64, at offset: Int) {
                for index in 0..<4 { image[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(index))) }
            }
            for check in checks {
                if case .marker(let at, let bytes) = check { image.replaceSubrange(at..<at + bytes.count, with: bytes) }
            }
            for check in checks {
                if case .magicPointer(let at, let base, let magic) = check {
                    while image.count % 4 != 0 { image.append(fill) }
                    put(base + UInt64(image.count), at: at)
                    image += [0, 0, 0, 0]
                    put(magic, at: image.count - 4)
                }
            }
            let crc = checks.compactMap { check -> Bool? in if case .crc32Suffix(let finalXor) = check { finalXor } else { nil } }.first
            for check in checks {
                if case .sizeAt(let at) = check { put(UInt64(image.count + (crc == nil ? 0 : 4)), at: at) }
            }
            if let finalXor = crc {
                var value = UInt64(CRC32.checksum(image))
                if !finalXor { value ^= 0xFFFF_FFFF }
                image += [0, 0, 0, 0]
                put(value, at: image.count - 4)
            }
            return image
        }
    }

    /// A check a device makes on the image it received, beyond what the messages carry.
    public enum ImageCheck: Sendable, Hashable {
        /// These bytes at this offset (Telink's "KNLT").
        case marker(at: Int, bytes: [UInt8])
        /// A little-endian u32 at this offset holds the image's length (Telink's at 0x18).
        case sizeAt(Int)
        /// The last four bytes are a CRC-32 of the bytes before them, little-endian:
        /// ISO-HDLC, or without its final exclusive or (Telink's).
        case crc32Suffix(finalXor: Bool)
        /// A little-endian u32 at `at` holds the address (from `base`) of a u32 equal to `magic` (STM32WB's 0x94448A29).
        case magicPointer(at: Int, base: UInt64, magic: UInt64)

        /// Why `image` fails the check, or nil when it passes.
        public func problem(_ image: [UInt8]) -> String? {
            func u32(_ offset: Int) -> UInt64? {
                guard offset >= 0, offset + 4 <= image.count else { return nil }
                return MessageTemplate.read(image[offset..<offset + 4], bigEndian: false)
            }
            switch self {
            case .marker(let at, let bytes):
                guard at + bytes.count <= image.count, image[at..<at + bytes.count].elementsEqual(bytes) else {
                    return "it lacks the marker \(bytes.map { String(format: "%02x", $0) }.joined(separator: " ")) at offset \(at)"
                }
                return nil
            case .sizeAt(let at):
                guard let size = u32(at) else { return "it is too short to hold its size at offset \(at)" }
                return size == UInt64(image.count) ? nil : "its size field at offset \(at) says \(size) bytes, but it has \(image.count)"
            case .crc32Suffix(let finalXor):
                guard image.count >= 4 else { return "it is too short to end with a CRC-32" }
                var crc = UInt64(CRC32.checksum(image.dropLast(4)))
                if !finalXor { crc ^= 0xFFFF_FFFF }
                return u32(image.count - 4) == crc ? nil : "it does not end with the CRC-32 of its bytes"
            case .magicPointer(let at, let base, let magic):
                guard let pointer = u32(at), pointer >= base, let value = u32(Int(pointer - base)) else {
                    return "its pointer at offset \(at) does not point inside the image"
                }
                return value == magic ? nil : String(format: "the word its pointer at offset %d names is not the magic 0x%08X", at, magic)
            }
        }
    }

    /// The update's steps, each a message sent and an optional answer awaited.
    public struct UpdateSteps: Sendable, Hashable {
        /// Sent to the application to make it restart into its bootloader (the
        /// host then reconnects); nil when one firmware does both.
        public var enterBootloader: Step?
        /// Where the bootloader advertises after the jump.
        public var bootloaderAddress: BootloaderAddress
        /// Whether entering the bootloader erases the application (STM32WB's loader
        /// does): a failed update then leaves the device in its bootloader.
        public var bootloaderErasesApplication: Bool
        public var start: Step?
        public var end: Step
        /// Sent after a successful end to make the device boot the new image;
        /// nil when the end itself does (the device restarts on its own).
        public var activate: Step?
    }

    public enum BootloaderAddress: String, Sendable, Hashable {
        /// The bootloader keeps the application's address.
        case same
        /// The bootloader advertises at the application's address + 1 (Nordic's habit).
        case plusOne = "plus-one"
    }

    /// A message sent, and what must come back.
    public struct Step: Sendable, Hashable {
        public var send: String
        /// The answer awaited; nil when the device does not answer.
        public var answer: String?
        public var timeout: Duration
    }

    /// How the image travels.
    public struct TransferRules: Sendable, Hashable {
        /// The data packet's template; it holds the ``MessageTemplate/Field/payload`` field.
        public var packet: String
        /// Image bytes per packet; nil for as many as the link carries.
        public var payloadSize: Int?
        /// When set, the last packet's payload is padded with it to the full size.
        public var padLastPacket: UInt8?
        public var flow: Flow
        /// What the device does with a packet whose index is not the next it expects.
        public var gap: GapRule
        /// What the device does with a packet whose checksum fails.
        public var badChecksum: GapRule
        /// Whether the device reports a failure at once (with the end's answer) and
        /// restarts into its old image, as Telink's does, or waits for the end command.
        public var failureReboots: Bool
        /// Whether the device keeps what it received across a disconnect, so the host continues
        /// from the device's next index (needs acknowledgements or requests to learn it).
        public var resume: Bool
        /// What the device's firmware does with a packet that finds its receive queue full: lost, or
        /// held on the link until it has room (``/BleotaEngine/FullQueueHandling``).
        public var whenQueueFull: FullQueueHandling = .drop
    }

    /// Flow control: how the host learns what arrived.
    public enum Flow: Sendable, Hashable {
        /// Nothing comes back until the end. `readEvery` packets, the host reads
        /// the characteristic `read` (a round trip that paces it: Telink's hosts do this).
        case none(readEvery: Int?, read: Int?)
        /// The device answers `ack` (carrying `next-index`, and `status` when it
        /// tells a gap from progress) after every `every` packets and at a gap.
        case acknowledged(ack: String, every: Int)
        /// The device asks for packets with `request` (carrying `index`, and `count` when it asks for several).
        case requested(request: String)
    }

    public enum GapRule: String, Sendable, Hashable {
        /// The update fails (the device answers the end with an error and keeps its old image).
        case fail
        /// The packet is dropped; acknowledgements or requests tell the host where to go on.
        case drop
    }

    /// The status values answers carry, named, and what each means to the device.
    public struct StatusTable: Sendable, Hashable {
        public var success: UInt64
        public var codes: [UInt64: StatusCode]

        public func name(_ value: UInt64) -> String {
            if value == success { return "success" }
            return codes[value].map { "\($0.name) (\(value))" } ?? "status \(value)"
        }

        /// The first code that means `meaning`, for the simulated device to answer with.
        public func code(for meaning: StatusMeaning) -> UInt64? {
            codes.filter { $0.value.meaning == meaning }.keys.min()
        }
    }

    public struct StatusCode: Sendable, Hashable {
        public var name: String
        public var meaning: StatusMeaning?
    }

    /// Conditions the simulated device reports with a status code.
    public enum StatusMeaning: String, Sendable, Hashable, CaseIterable {
        case gap, badChecksum = "bad-checksum", incomplete, verifyFailed = "verify-failed"
        case tooBig = "too-big", notStarted = "not-started", badCommand = "bad-command"
    }

    /// The characteristics as the GATT channels of a channel link.
    public var gattChannels: [GATTChannel] {
        characteristics.enumerated().map { index, item in
            GATTChannel(
                number: UInt8(index), service: service, characteristic: item.uuid, write: item.write,
                update: item.update, readable: item.readable)
        }
    }

    public func message(_ name: String) -> MessageTemplate { messages[name]! }
}
