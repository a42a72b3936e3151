import BleotaCodec
import BleotaEngine
import BleotaLink

/// An ESP32 running esp-iot-solution's `ble_ota_raw` profile and its OTA
/// example — the device half of ``EspressifOTAProtocol``.
///
/// As the firmware does: START is refused while an upload runs, with length 0,
/// or larger than the OTA partition, and its acknowledgement carries the sector
/// window; each sector is checked against its CRC-16 (a bad one is answered
/// 0x0001 and expected again); a packet out of sequence spoils its sector,
/// which is answered 0x0002 with the sector still expected when its last
/// packet arrives (as the NimBLE profile does); a sector other than the
/// expected one is answered 0x0002 with the expected index. Once the bytes
/// START announced have arrived the image is validated (`esp_ota_end`: the
/// magic byte and the appended SHA-256) and, if good, made the boot partition
/// and the device restarts 200 ms later; a bad image is dropped silently —
/// the real firmware reports nothing over BLE either — and the old one keeps
/// running. A disconnect ends the upload.
///
/// An upload that starts with `esp_delta_ota`'s header (magic 0xfccdde10, then
/// the base's SHA-256) is a patch, as an application built on `esp_delta_ota`
/// treats it: the header's hash must be the running image's
/// (`esp_partition_get_sha256`), each sector is fed to the patcher as it is
/// acknowledged, which reads the running image and writes the new one into
/// the OTA partition, and at the end the rebuilt image is validated as a sent
/// one is. A patch for another base, damaged or cut short never activates:
/// the device stays silent and keeps its image. RAM for a patch, besides the
/// 4 KiB sector buffer: the patcher's heatshrink window (256 bytes) and a few
/// counters; the base is read from the running partition a byte at a time.
package actor EspressifOTADevice: DeviceHalf {
    package static let sectorSize = 4096

    package nonisolated let window: UInt8
    package nonisolated let partitionSize: Int
    package private(set) var running: [UInt8]
    private var upload: Upload?

    /// The OTA example (`app_main.c`) hands each sector to a ring buffer with `xRingbufferSend` and
    /// no timeout, so a full ring blocks the Bluetooth host task: the writes behind it wait in the
    /// stack's buffers and the link layer holds them, and none is lost for want of room.
    package nonisolated var whenQueueFull: FullQueueHandling { .hold }

    struct Upload {
        var length: Int
        /// What has arrived so far: the image, or for a patch, its bytes counted (the patcher takes them).
        var received: [UInt8] = []
        var receivedCount = 0
        var sector: UInt16 = 0
        var nextSequence: UInt8 = 0
        var sectorBytes: [UInt8] = []
        var sequenceBroken = false
        /// Set by the first sector when it starts with esp_delta_ota's magic.
        var patch: PatchReceiver?
    }

    /// An `esp_delta_ota`-style patcher: the header gathered, then the body applied as it arrives.
    struct PatchReceiver {
        var header: [UInt8] = []
        var applier: DeltaPatchApplier?
        /// The OTA partition being written.
        var rebuilt: [UInt8] = []
        /// Why the patch will not be activated, once known (the real application logs it and aborts).
        var refusal: String?

        /// Whether `bytes` (the upload's start) are a patch.
        static func starts(_ bytes: [UInt8]) -> Bool {
            let magic = DeltaPatchHeader.espMagic
            return bytes.count >= 4 && bytes.prefix(4).elementsEqual([UInt8(magic & 0xFF), UInt8(magic >> 8 & 0xFF), UInt8(magic >> 16 & 0xFF), UInt8(magic >> 24)])
        }

        mutating func feed(_ bytes: [UInt8], running: [UInt8]) {
            guard refusal == nil else { return }
            var body = bytes[...]
            if applier == nil {
                header += bytes
                let parsed: DeltaPatchHeader
                do { parsed = try DeltaPatchHeader(reading: header) } catch {
                    // Not all of the header yet (the new image's size ends a few bytes past the 64): wait.
                    if error.kind != .truncated { refusal = "\(error)" }
                    return
                }
                guard parsed.espBaseSHA256 == DeltaPatch.espBaseSHA256(of: running) else {
                    refusal = "the patch is for another base than the running image"
                    return
                }
                applier = DeltaPatchApplier(header: parsed, baseSize: running.count)
                body = header[parsed.size...]
                header = []
            }
            do { try applier?.consume(body, base: { running[$0] }, into: &rebuilt) } catch { refusal = "\(error)" }
        }

        /// The rebuilt image once the whole patch has been fed, or nil (with `refusal` set).
        mutating func finish() -> [UInt8]? {
            guard refusal == nil else { return nil }
            guard let applier else {
                refusal = "the patch ended inside its header"
                return nil
            }
            do { try applier.finish() } catch {
                refusal = "\(error)"
                return nil
            }
            return rebuilt
        }
    }

    package init(partitionSize: Int, window: UInt8 = 3, initialImage: [UInt8]) {
        self.partitionSize = partitionSize
        self.window = window
        running = initialImage
    }

    package var mode: DeviceMode { .application }

    package var firmware: FirmwareState { FirmwareState(running: running) }

    package var runningVersion: String { "\(running.count) bytes (SHA-256 \(SHA256Digest.hash(running).hexString))" }

    package var readableValues: [UInt8: [UInt8]] { [EspressifOTAChannel.progress.rawValue: [0, 0]] }

    package func powerCycle() { upload = nil }

    package func serve(_ link: any Link, environment: DeviceEnvironment) async {
        upload = nil
        defer { upload = nil }
        while let request = await environment.nextChannelRequest(from: link, channels: { EspressifOTAChannel.allCases.map(\.rawValue) }) {
            if case .read(EspressifOTAChannel.progress.rawValue) = request {
                // PROGRESS_BAR reads as no progress: bleota's device keeps none.
                do throws(LinkError) { try await link.send(channel: EspressifOTAChannel.progress.rawValue, [0, 0]) } catch { return }
                continue
            }
            guard case .packet(let number, let payload) = request, let channel = EspressifOTAChannel(rawValue: number) else { continue }
            do throws(LinkError) {
                switch channel {
                case .command:
                    try await command(payload, link: link)
                case .firmware:
                    if try await firmware(payload, link: link, environment: environment) {
                        // esp_ota_set_boot_partition, then esp_restart after 200 ms.
                        try? await environment.clock.sleep(for: .milliseconds(200))
                        await environment.reboot(RebootRequest())
                        return
                    }
                case .progress, .customer:
                    break
                }
            } catch { return }
        }
    }

    private func command(_ payload: ArraySlice<UInt8>, link: any Link) async throws(LinkError) {
        let command: EspressifCommand
        do { command = try EspressifCommand(decoding: payload) } catch {
            // A command that does not decode is refused (ble_ota_raw echoes the id it read).
            let id = payload.count >= 2 ? UInt16(payload[payload.startIndex]) | UInt16(payload[payload.startIndex + 1]) << 8 : 0
            try await answer(EspressifCommandAck(command: id, accepted: false), link: link)
            return
        }
        switch command {
        case .start(let length):
            guard upload == nil, length > 0, Int(length) <= partitionSize else {
                try await answer(EspressifCommandAck(command: command.id, accepted: false), link: link)
                return
            }
            upload = Upload(length: Int(length))
            try await answer(EspressifCommandAck(command: command.id, accepted: true, window: window), link: link)
        case .stop:
            let running = upload != nil
            upload = nil
            try await answer(EspressifCommandAck(command: command.id, accepted: running), link: link)
        }
    }

    private func answer(_ ack: EspressifCommandAck, link: any Link) async throws(LinkError) {
        try await link.send(channel: EspressifOTAChannel.command.rawValue, ack.encode())
    }

    private func answer(_ ack: EspressifSectorAck, link: any Link) async throws(LinkError) {
        try await link.send(channel: EspressifOTAChannel.firmware.rawValue, ack.encode())
    }

    /// One firmware packet; true once the whole image arrived and verified (the device then restarts).
    private func firmware(_ payload: ArraySlice<UInt8>, link: any Link, environment: DeviceEnvironment) async throws(LinkError) -> Bool {
        guard var current = upload else { return false }
        var finished = false
        defer { upload = finished ? nil : current }
        let packet: EspressifFirmwarePacket
        do { packet = try EspressifFirmwarePacket(decoding: payload) } catch {
            try await answer(EspressifSectorAck(sector: current.sector, status: .payloadLengthError, expected: current.sector), link: link)
            return false
        }
        guard packet.sector == current.sector else {
            // Answered on the sector's last packet, once, so a sector sent ahead costs one answer.
            if packet.isLast {
                try await answer(EspressifSectorAck(sector: packet.sector, status: .sectorIndexError, expected: current.sector), link: link)
            }
            return false
        }
        if !packet.isLast {
            guard packet.sequence == current.nextSequence, !current.sequenceBroken else {
                current.sequenceBroken = true
                current.sectorBytes = []
                return false
            }
            current.sectorBytes += packet.data
            current.nextSequence &+= 1
            guard current.sectorBytes.count <= Self.sectorSize else {
                current.sectorBytes = []
                current.nextSequence = 0
                try await answer(EspressifSectorAck(sector: current.sector, status: .payloadLengthError, expected: current.sector), link: link)
                return false
            }
            return false
        }
        defer {
            current.sectorBytes = []
            current.nextSequence = 0
            current.sequenceBroken = false
        }
        if current.sequenceBroken {
            try await answer(EspressifSectorAck(sector: current.sector, status: .sectorIndexError, expected: current.sector), link: link)
            return false
        }
        let sector = current.sectorBytes + packet.data
        guard sector.count <= Self.sectorSize else {
            try await answer(EspressifSectorAck(sector: current.sector, status: .payloadLengthError, expected: current.sector), link: link)
            return false
        }
        guard EspressifCRC.of(sector) == packet.sectorCRC else {
            try await answer(EspressifSectorAck(sector: current.sector, status: .crcError, expected: current.sector), link: link)
            return false
        }
        if environment.writeTimePerByte > .zero {
            try? await environment.clock.sleep(for: environment.writeTimePerByte * sector.count)
        }
        let wanted = Array(sector.prefix(current.length - current.receivedCount))
        if current.receivedCount == 0, PatchReceiver.starts(wanted) { current.patch = PatchReceiver() }
        if current.patch != nil {
            current.patch?.feed(wanted, running: running)
        } else {
            current.received += wanted
        }
        current.receivedCount += wanted.count
        current.sector &+= 1
        try await answer(EspressifSectorAck(sector: packet.sector, status: .success, expected: current.sector), link: link)
        guard current.receivedCount >= current.length else { return false }
        finished = true
        // The example's OTA task: esp_delta_ota_finalize for a patch, then esp_ota_end validates,
        // and the boot partition changes.
        let image: [UInt8]
        if current.patch != nil {
            guard let rebuilt = current.patch?.finish() else { return false }
            image = rebuilt
        } else {
            image = current.received
        }
        guard image.count <= partitionSize, ESPAppImage.problem(image) == nil else { return false }
        running = image
        return true
    }
}
