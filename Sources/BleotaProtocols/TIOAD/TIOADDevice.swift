import BleotaCodec
import BleotaEngine
import BleotaLink

/// A CC26x2 running BLE5-Stack's off-chip OAD profile (`oad.c`) — the device
/// half of ``TIOADProtocol``.
///
/// As the profile does: Get Block Size answers the link's MTU − 3 rounded down
/// to a multiple of 4 (20…244, the 4-byte block number included); Image
/// Identify is checked (image ID, BIM and metadata versions, size, image type)
/// and answered with one status byte, three refusals in a row being
/// OAD_IMG_ID_TIMEOUT; Start OAD asks for block 0, and every block is asked for
/// after the previous one is written; a block of the wrong number or length
/// (OAD_BUFFER_OFL), a block before Start (OAD_NOT_STARTED) or a CRC-32 that
/// does not match at the end (OAD_CRC_ERR) reset the profile to idle with no
/// retry — the host starts again from Image Identify; ten seconds without a
/// block reset it silently. OAD_DL_COMPLETE, then Enable Image, restarts the
/// device into the new image; until then the old image runs.
package actor TIOADDevice: DeviceHalf {
    package nonisolated let slotSize: Int
    package nonisolated let blockSize: Int
    package private(set) var running: [UInt8]
    private var state = State.idle
    private var identifyFailures = 0

    enum State {
        case idle
        /// Identify accepted: the image's length, waiting for Start.
        case configured(length: Int)
        case downloading(length: Int, next: UInt32, received: [UInt8])
        case complete([UInt8])
    }

    /// The idle time after which the profile resets (`OAD_open`'s default).
    package static let inactivityTimeout = Duration.seconds(10)

    package init(slotSize: Int, maximumPacket: Int, initialImage: [UInt8]) {
        self.slotSize = slotSize
        blockSize = min(244, max(20, maximumPacket / 4 * 4))
        running = initialImage
    }

    package var mode: DeviceMode { .application }

    package var firmware: FirmwareState { FirmwareState(running: running) }

    package var runningVersion: String { "\(running.count) bytes (SHA-256 \(SHA256Digest.hash(running).hexString))" }

    package func powerCycle() {
        state = .idle
        identifyFailures = 0
    }

    package func serve(_ link: any Link, environment: DeviceEnvironment) async {
        state = .idle
        while true {
            let packet: ChannelMessage
            do {
                guard let next = try await link.receiveMessage(within: Self.inactivityTimeout, clock: environment.clock) else {
                    state = .idle
                    continue
                }
                packet = next
            } catch { return }
            let cost = environment.processingTime(packet.framedSize)
            if cost > .zero { try? await environment.clock.sleep(for: cost) }
            if packet == .directoryQuery {
                do { try await link.send(message: .directory(TIOADChannel.allCases.map(\.rawValue))) } catch { return }
                continue
            }
            guard case .packet(let number, let payload) = packet, let channel = TIOADChannel(rawValue: number) else { continue }
            do throws(LinkError) {
                switch channel {
                case .identify: try await identify(payload, link: link)
                case .block: try await block(payload, link: link, environment: environment)
                case .control:
                    if let reboot = try await control(payload, link: link) {
                        await environment.reboot(reboot)
                        return
                    }
                }
            } catch { return }
        }
    }

    private func notify(_ channel: TIOADChannel, _ bytes: [UInt8], _ link: any Link) async throws(LinkError) {
        try await link.send(channel: channel.rawValue, bytes)
    }

    private func request(_ status: TIOADStatus, block: UInt32, _ link: any Link) async throws(LinkError) {
        try await notify(.control, TIOADBlockRequest(status: status.rawValue, block: block).encode(), link)
    }

    private func identify(_ payload: ArraySlice<UInt8>, link: any Link) async throws(LinkError) {
        let bytes = Array(payload)
        var status = TIOADStatus.success
        if bytes.count < 18 || Array(bytes[0..<8]) != TIOADImageHeader.cc26x2 {
            status = .invalidFile
        } else if bytes[8] != TIOADImageHeader.bimVersion || bytes[9] != TIOADImageHeader.metadataVersion {
            status = .incompatibleFile
        } else if ![1, 2, 3, 7].contains(bytes[12]) {
            status = .incompatibleImage
        } else if Int(TIOADWire.read(payload.dropFirst(14))) > slotSize {
            status = .imageTooBig
        }
        guard status == .success else {
            identifyFailures += 1
            state = .idle
            try await notify(.identify, [identifyFailures >= 3 ? TIOADStatus.identifyTimeout.rawValue : status.rawValue], link)
            return
        }
        identifyFailures = 0
        state = .configured(length: Int(TIOADWire.read(payload.dropFirst(14))))
        try await notify(.identify, [TIOADStatus.success.rawValue], link)
    }

    private func control(_ payload: ArraySlice<UInt8>, link: any Link) async throws(LinkError) -> RebootRequest? {
        guard let opcode = payload.first else { return nil }
        switch TIOADCommand(rawValue: opcode) {
        case .getBlockSize?:
            try await notify(.control, [opcode, UInt8(blockSize & 0xFF), UInt8(blockSize >> 8)], link)
        case .startOAD?:
            guard case .configured(let length) = state else {
                try await notify(.control, [opcode, TIOADStatus.notStarted.rawValue], link)
                return nil
            }
            state = .downloading(length: length, next: 0, received: [])
            try await request(.success, block: 0, link)
        case .enableImage?:
            guard case .complete(let image) = state else {
                try await notify(.control, [opcode, TIOADStatus.downloadNotComplete.rawValue], link)
                return nil
            }
            try await notify(.control, [opcode, TIOADStatus.success.rawValue], link)
            // The application resets; the BIM copies the image and boots it.
            running = image
            state = .idle
            return RebootRequest()
        case .cancelOAD?:
            let wasIdle: Bool = if case .idle = state { true } else { false }
            state = .idle
            try await notify(.control, [opcode, wasIdle ? TIOADStatus.notStarted.rawValue : TIOADStatus.success.rawValue], link)
        case .getSoftwareVersion?:
            try await notify(.control, [opcode] + Array(running.count >= 36 ? running[32..<36] : [0, 0, 0, 0]), link)
        case .getDeviceType?:
            try await notify(.control, [opcode, 0x0B, 0x03, 0x00, 0xFF], link)
        case .blockRequest?, nil:
            try await notify(.control, [TIOADCommand.notSupported], link)
        }
        return nil
    }

    private func block(_ payload: ArraySlice<UInt8>, link: any Link, environment: DeviceEnvironment) async throws(LinkError) {
        guard case .downloading(let length, let next, var received) = state else {
            state = .idle
            try await request(.notStarted, block: 0, link)
            return
        }
        let data = blockSize - 4
        let expectedLength = min(data, length - Int(next) * data) + 4
        guard payload.count == expectedLength, TIOADWire.read(payload.prefix(4)) == next else {
            state = .idle
            try await request(.bufferOverflow, block: 0, link)
            return
        }
        if environment.writeTimePerByte > .zero { try? await environment.clock.sleep(for: environment.writeTimePerByte * (payload.count - 4)) }
        received += payload.dropFirst(4)
        guard received.count >= length else {
            state = .downloading(length: length, next: next + 1, received: received)
            try await request(.success, block: next + 1, link)
            return
        }
        // The whole image: its CRC-32 against the header (oadCheckDL).
        guard TIOADImageHeader.problem(received) == nil else {
            state = .idle
            try await request(.crcError, block: next, link)
            return
        }
        state = .complete(received)
        try await request(.downloadComplete, block: next + 1, link)
    }
}
