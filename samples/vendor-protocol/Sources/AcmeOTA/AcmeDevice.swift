import BleotaCodec
import BleotaEngine
import BleotaLink

/// The device half of ACME OTA, as the vendor's firmware behaves: it keeps
/// the running image and its version in flash, receives an upload into RAM
/// with bleota's ``ReceiverWindow`` (acknowledging every eight packets,
/// reporting gaps at once), checks the whole image's CRC-32 at END, and only
/// then activates it and reboots. The simulator, `bleota sim serve` and
/// `bleota serve` host it like any built-in device half.
public actor AcmeDevice: DeviceHalf {
    public private(set) var activeImage: [UInt8]
    public private(set) var activeVersion: String
    public let slotSize: Int
    private var upload: (start: (length: Int, crc32: UInt32, chunk: Int, version: String), bytes: [UInt8], receiver: ReceiverWindow)?
    static let acknowledgeEvery = 8

    public init(version: String, slotSize: Int) {
        activeImage = []
        activeVersion = version
        self.slotSize = slotSize
    }

    public var mode: DeviceMode { .application }
    public var runningVersion: String { activeVersion }
    public var firmware: FirmwareState { FirmwareState(running: activeImage, version: activeVersion) }
    public func powerCycle() { upload = nil }

    public func serve(_ link: any Link, environment: DeviceEnvironment) async {
        while true {
            guard let packet = try? await link.receive() else { return }
            let cost = environment.processingTime(packet.count)
            if cost > .zero { try? await environment.clock.sleep(for: cost) }
            let answers: [AcmeMessage]
            let reboot: Bool
            do { (answers, reboot) = handle(try AcmeMessage(decoding: packet)) } catch {
                // A damaged DATA packet is a gap to report; anything else damaged is ignored.
                guard packet.first == AcmeMessage.Opcode.data.rawValue, let upload else { continue }
                (answers, reboot) = ([.status(.missing, next: SequenceNumber.wrap(upload.receiver.nextExpected), count: 1)], false)
            }
            for answer in answers { do { try await link.send(answer.encode()) } catch { return } }
            if reboot {
                await environment.reboot(RebootRequest())
                return
            }
        }
    }

    private func handle(_ message: AcmeMessage) -> (answers: [AcmeMessage], reboot: Bool) {
        switch message {
        case .versionRequest:
            return ([.version(activeVersion)], false)
        case .start(let length, let crc32, let chunk, let version):
            guard Int(length) <= slotSize else { return ([.status(.tooLarge, next: 0, count: 0)], false) }
            guard chunk > 0 else { return ([.status(.badState, next: 0, count: 0)], false) }
            let count = (Int(length) + Int(chunk) - 1) / Int(chunk)
            upload = ((Int(length), crc32, Int(chunk), version), [UInt8](repeating: 0, count: Int(length)), ReceiverWindow(packetCount: count))
            return ([.status(.ok, next: 0, count: 0)], false)
        case .data(let index, let payload):
            guard var current = upload else { return ([.status(.badState, next: 0, count: 0)], false) }
            var answers: [AcmeMessage] = []
            switch current.receiver.receive(sequence: index) {
            case .new(let absolute, let gap):
                let offset = absolute * current.start.chunk
                let expected = min(current.start.chunk, current.start.length - offset)
                guard payload.count == expected else {
                    return ([.status(.missing, next: SequenceNumber.wrap(current.receiver.nextExpected), count: 1)], false)
                }
                current.bytes.replaceSubrange(offset..<offset + expected, with: payload)
                if let gap { answers.append(.status(.missing, next: SequenceNumber.wrap(gap.lowerBound), count: UInt16(clamping: gap.count))) }
            case .duplicate, .outOfWindow:
                break
            }
            if current.receiver.sinceAcknowledgement >= Self.acknowledgeEvery || current.receiver.isComplete {
                _ = current.receiver.acknowledgement(bitmapBytes: 0)
                answers.append(.status(.ok, next: SequenceNumber.wrap(current.receiver.nextExpected), count: 0))
            }
            upload = current
            return (answers, false)
        case .poll:
            guard let upload else { return ([.status(.badState, next: 0, count: 0)], false) }
            return ([.status(.ok, next: SequenceNumber.wrap(upload.receiver.nextExpected), count: 0)], false)
        case .end:
            guard let current = upload, current.receiver.isComplete else { return ([.status(.badState, next: 0, count: 0)], false) }
            upload = nil
            guard CRC32.checksum(current.bytes) == current.start.crc32 else { return ([.status(.verifyFailed, next: 0, count: 0)], false) }
            activeImage = current.bytes
            activeVersion = current.start.version
            return ([.status(.done, next: 0, count: 0)], true)
        case .status, .version:
            return ([], false)
        }
    }
}
