import BleotaCodec
import BleotaEngine
import BleotaLink

/// A DA1469x with Renesas' SUOTA 1.3 service over GATT (SDK10 `dlg_suota.c`,
/// as its DA1468x and UART ports show it) — the device half of ``SUOTAProtocol``.
///
/// As the firmware does: MEM_DEV 0x13… starts an image upload (IMG_STARTED),
/// any other memory type is refused (INVAL_MEM_TYPE); PATCH_DATA bytes collect
/// into blocks of PATCH_LEN, each acknowledged CMP_OK, more than PATCH_LEN in a
/// block is PATCH_LEN_ERR; the first block's header must carry "Qq" and a size
/// the partition holds (INVAL_IMG_HDR, INVAL_IMG_SIZE), and not the version and
/// timestamp the device already runs (SAME_IMG_ERR); END checks the CRC-32 of
/// the code (CMP_OK or CRC_ERR) and, when it matches, commits the new header;
/// REBOOT restarts the device. Any disconnect during an upload restarts it too
/// (DA1468x's rule). At every start the bootloader installs a committed image:
/// before a good END the old image keeps running, after it the new one runs,
/// whatever restarted the device.
///
/// The CRC-32 covers the code only, as on the real chips: the header's version
/// and timestamp and its extension are taken as they arrive.
package actor SUOTADevice: DeviceHalf {
    package nonisolated let partitionSize: Int
    package nonisolated let patchDataSize: UInt16
    package private(set) var running: [UInt8]
    private var upload: Upload?
    /// An image whose header END committed: the bootloader installs it at the next start.
    private var committed: [UInt8]?

    struct Upload {
        var patchLength = 0
        var block: [UInt8] = []
        var received: [UInt8] = []
        var header: SUOTAImageHeader?
        var verified = false
        var failed = false
    }

    package init(partitionSize: Int, patchDataSize: UInt16 = 244, initialImage: [UInt8]) {
        self.partitionSize = partitionSize
        self.patchDataSize = patchDataSize
        running = initialImage
    }

    package var mode: DeviceMode { .application }

    package var firmware: FirmwareState { FirmwareState(running: running) }

    package var runningVersion: String { "\(running.count) bytes (SHA-256 \(SHA256Digest.hash(running).hexString))" }

    /// Every readable characteristic's value now (`bleota serve` asks at each read): MEM_INFO counts what arrived.
    package var readableValues: [UInt8: [UInt8]] {
        [
            SUOTAChannel.version.rawValue: [13], SUOTAChannel.patchDataSize.rawValue: SUOTAWire.u16(patchDataSize),
            SUOTAChannel.mtu.rawValue: SUOTAWire.u16(247),
            SUOTAChannel.memoryInfo.rawValue: SUOTAWire.u32(UInt32((upload?.received.count ?? 0) + (upload?.block.count ?? 0))),
            SUOTAChannel.memoryDevice.rawValue: SUOTAWire.u32(0), SUOTAChannel.gpioMap.rawValue: SUOTAWire.u32(0),
            SUOTAChannel.patchLength.rawValue: SUOTAWire.u16(UInt16(clamping: upload?.patchLength ?? 0)), SUOTAChannel.status.rawValue: [0],
            SUOTAChannel.l2capPSM.rawValue: SUOTAWire.u16(SUOTAChannel.defaultPSM),
        ]
    }

    package func powerCycle() {
        upload = nil
        if let committed {
            running = committed
            self.committed = nil
        }
    }

    package func serve(_ link: any Link, environment: DeviceEnvironment) async {
        upload = nil
        while true {
            guard let request = await environment.nextChannelRequest(from: link, channels: { SUOTAChannel.allCases.map(\.rawValue) + [SUOTAChannel.creditData] }) else {
                // A disconnect during an upload restarts the device (the bootloader then installs a committed image).
                if upload != nil {
                    upload = nil
                    await environment.reboot(RebootRequest())
                }
                return
            }
            if case .read(let number) = request {
                guard let channel = SUOTAChannel(rawValue: number), channel.gattChannel.readable else { continue }
                do throws(LinkError) { try await link.send(channel: number, read(channel)) } catch { return }
                continue
            }
            guard case .packet(let number, let payload) = request else { continue }
            if number == SUOTAChannel.creditData {
                do throws(LinkError) { try await creditData(payload, link: link, environment: environment) } catch { return }
                continue
            }
            guard let channel = SUOTAChannel(rawValue: number) else { continue }
            do throws(LinkError) {
                switch channel {
                case .memoryDevice:
                    if let reboot = try await memoryDevice(payload, link: link) {
                        await environment.reboot(reboot)
                        return
                    }
                case .patchLength:
                    guard payload.count == 2, upload != nil else { continue }
                    upload?.patchLength = Int(SUOTAWire.read(payload)!)
                case .patchData:
                    try await patchData(payload, link: link, environment: environment)
                case .gpioMap, .memoryInfo, .status, .version, .patchDataSize, .mtu, .l2capPSM:
                    break
                }
            } catch { return }
        }
    }

    private func read(_ channel: SUOTAChannel) -> [UInt8] { readableValues[channel.rawValue] ?? [] }

    private func notify(_ status: SUOTAStatus, _ link: any Link) async throws(LinkError) {
        try await link.send(channel: SUOTAChannel.status.rawValue, [status.rawValue])
    }

    private func memoryDevice(_ payload: ArraySlice<UInt8>, link: any Link) async throws(LinkError) -> RebootRequest? {
        guard payload.count == 4, let value = SUOTAWire.read(payload) else { return nil }
        switch SUOTAMemoryCommand(value: value) {
        case .spiFlash:
            upload = Upload()
            committed = nil
            try await notify(.imageStarted, link)
        case .other:
            try await notify(.invalidMemoryType, link)
        case .abort:
            upload = nil
            try await notify(.serviceExit, link)
        case .end:
            guard var current = upload, !current.failed, let header = current.header else {
                try await notify(.crcError, link)
                return nil
            }
            let end = Int(header.codeOffset) + Int(header.codeSize)
            // Trailing bytes (the XOR byte hosts append) are ignored, as on DA1468x/DA1469x.
            guard current.received.count >= end,
                CRC32.checksum(current.received[Int(header.codeOffset)..<end]) == header.crc
            else {
                current.failed = true
                upload = current
                try await notify(.crcError, link)
                return nil
            }
            current.verified = true
            current.received = Array(current.received.prefix(end))
            upload = current
            committed = current.received
            try await notify(.completeOK, link)
        case .reboot:
            upload = nil
            return RebootRequest()
        }
        return nil
    }

    private func patchData(_ payload: ArraySlice<UInt8>, link: any Link, environment: DeviceEnvironment) async throws(LinkError) {
        guard var current = upload, !current.failed, !current.verified else { return }
        defer { upload = current }
        guard current.patchLength > 0 else {
            current.failed = true
            try await notify(.patchLengthError, link)
            return
        }
        current.block += payload
        guard current.block.count <= current.patchLength else {
            current.failed = true
            try await notify(.patchLengthError, link)
            return
        }
        guard current.block.count == current.patchLength else { return }
        let block = current.block
        current.block = []
        guard try await take(block, into: &current, link: link, environment: environment) else { return }
        try await notify(.completeOK, link)
    }

    /// Image bytes on the credit-based channel (the DA1468x's `suota_l2cap` path): no PATCH_LEN,
    /// no CMP_OK per block — the bytes go straight on, the header checked once it has arrived.
    private func creditData(_ payload: ArraySlice<UInt8>, link: any Link, environment: DeviceEnvironment) async throws(LinkError) {
        // The device listens on its PSM only once MEM_DEV started an upload.
        guard var current = upload, !current.failed, !current.verified else { return }
        defer { upload = current }
        current.block += payload
        guard current.header != nil || current.block.count >= SUOTAImageHeader.size else { return }
        let bytes = current.block
        current.block = []
        _ = try await take(bytes, into: &current, link: link, environment: environment)
    }

    /// Checks the header in the first bytes of an upload and stores `block`; false (with the
    /// status notified and the upload failed) when the device refuses.
    private func take(_ block: [UInt8], into current: inout Upload, link: any Link, environment: DeviceEnvironment) async throws(LinkError) -> Bool {
        if current.header == nil {
            let header: SUOTAImageHeader
            do { header = try SUOTAImageHeader(decoding: block) } catch {
                current.failed = true
                try await notify(.invalidImageHeader, link)
                return false
            }
            guard header.codeSize > 0, Int(header.codeOffset) + Int(header.codeSize) <= partitionSize else {
                current.failed = true
                try await notify(.invalidImageSize, link)
                return false
            }
            if let running = try? SUOTAImageHeader(decoding: running), running.version == header.version, running.timestamp == header.timestamp {
                current.failed = true
                try await notify(.sameImage, link)
                return false
            }
            current.header = header
        }
        guard current.received.count + block.count <= partitionSize + 1 else {
            current.failed = true
            try await notify(.externalMemoryWriteError, link)
            return false
        }
        if environment.writeTimePerByte > .zero { try? await environment.clock.sleep(for: environment.writeTimePerByte * block.count) }
        current.received += block
        return true
    }
}
