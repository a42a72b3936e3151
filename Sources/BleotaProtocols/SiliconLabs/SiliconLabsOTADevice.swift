import BleotaCodec
import BleotaEngine
import BleotaLink

/// An EFR32 (Series 1 or 2) with Silicon Labs' AppLoader — the device half of
/// ``SiliconLabsOTAProtocol``.
///
/// As the firmware does (UG266, AN1086, the Gecko SDK's in-place OTA
/// component and `btl_gbl_parser`): the application offers OTA Control only,
/// and any write to it is acknowledged and followed by a reset into the
/// AppLoader, which advertises "OTA" from the same address with its own GATT
/// database (Control, Data and the four versions). There 0x00 begins an
/// upload at position 0; OTA Data is the GBL file, in order, with no offsets
/// and no answers, programmed in place as it arrives (the old application is
/// gone from the first program tag on; the parser holds back the reset vector
/// until the file verifies, so a device whose upload failed boots into the
/// AppLoader again); 0x03 parses the whole file and answers through the
/// Write Response: success, or CRC_ERROR, NOT_SUPPORTED, IMAGE_TOO_BIG,
/// WRONG_STATE (data or end before 0x00). A verified file is booted when the
/// connection closes (0x04 or the host's disconnect).
package actor SiliconLabsOTADevice: DeviceHalf {
    package nonisolated let slotSize: Int
    /// The installed application's GBL file; nil once an upload overwrote it (the AppLoader then runs).
    package private(set) var application: [UInt8]?
    private var inAppLoader = false
    /// Set by the application's trigger: the next start runs the AppLoader (a flag the reset keeps).
    private var appLoaderRequested = false
    private var upload: Upload?
    /// A file that verified at 0x03: booted when the connection closes.
    private var verified: [UInt8]?

    struct Upload {
        var received: [UInt8] = []
        /// An error met while the data streamed, answered at 0x03 (writes without response have no answer).
        var error: SiliconLabsOTAError?
    }

    package static let appLoaderName = "OTA"
    /// The AppLoader's version (1.0.0-2839, UG266's example) and the Gecko bootloader's (1.4).
    static let appLoaderVersion: [UInt8] = [0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x17, 0x0B]
    static let bootloaderVersion: [UInt8] = [0x00, 0x00, 0x04, 0x01]

    /// `inAppLoader`: the device starts in its AppLoader (as one whose application asked for it).
    package init(slotSize: Int, initialApplication: [UInt8], inAppLoader: Bool = false) {
        self.slotSize = slotSize
        application = initialApplication
        self.inAppLoader = inAppLoader
    }

    package var mode: DeviceMode { inAppLoader || application == nil ? .bootloader : .application }

    /// The AppLoader overwrites the application in place: without one, the device waits in the AppLoader.
    package var firmware: FirmwareState { FirmwareState(running: application, mode: mode) }
    package var bootloaderKeepsAddress: Bool { true }

    /// The AppLoader is a binary, but the Gecko SDK's in-place OTA component (`sl_bt_app_ota_dfu.c`)
    /// programs each OTA Data write in the stack's event loop before it takes the next event, so a
    /// slow write leaves the next ones in the stack's buffers and the link layer holds them (the
    /// AppLoader is taken to do as its SDK does; `protocols/silabs-ota.md`).
    package nonisolated var whenQueueFull: FullQueueHandling { .hold }
    package var advertisedName: String? { mode == .bootloader ? Self.appLoaderName : nil }

    /// The running file's size and SHA-256 (scripts compare them with the .gbl sent), and its application version.
    package var runningVersion: String {
        guard let application else { return "the AppLoader (no application)" }
        let running = "\(application.count) bytes (SHA-256 \(SHA256Digest.hash(application).hexString)), application version \(Self.version(of: application))"
        return mode == .application ? running : "the AppLoader (the application kept: \(running))"
    }

    static func version(of file: [UInt8]) -> UInt32 { (try? GeckoBootloaderImage(decoding: file))?.applicationVersion ?? 0 }

    package var offeredChannels: [UInt8]? {
        mode == .application
            ? [SiliconLabsOTAChannel.control.rawValue, SiliconLabsOTAChannel.applicationVersion.rawValue]
            : SiliconLabsOTAChannel.allCases.map(\.rawValue)
    }

    package var readableValues: [UInt8: [UInt8]] {
        let version = application.map(Self.version(of:)) ?? 0
        return [
            SiliconLabsOTAChannel.apploaderVersion.rawValue: Self.appLoaderVersion,
            SiliconLabsOTAChannel.otaVersion.rawValue: [3],
            SiliconLabsOTAChannel.bootloaderVersion.rawValue: Self.bootloaderVersion,
            SiliconLabsOTAChannel.applicationVersion.rawValue: (0..<4).map { UInt8(truncatingIfNeeded: version >> ($0 * 8)) },
        ]
    }

    package func powerCycle() {
        upload = nil
        if let verified {
            application = verified
            self.verified = nil
            inAppLoader = false
        } else {
            // The AppLoader runs when asked for or when no application can boot; an intact
            // application boots after any other reset (a power cut in the AppLoader included).
            inAppLoader = appLoaderRequested || application == nil
        }
        appLoaderRequested = false
    }

    package func serve(_ link: any Link, environment: DeviceEnvironment) async {
        upload = nil
        while true {
            guard let request = await environment.nextChannelRequest(from: link, channels: { await self.offeredChannels ?? [] }) else {
                // The connection closed: the AppLoader boots a verified file.
                if verified != nil { await environment.reboot(RebootRequest()) }
                return
            }
            if case .read(let number) = request {
                guard let channel = SiliconLabsOTAChannel(rawValue: number), channel.gattChannel.readable, (offeredChannels ?? []).contains(number) else { continue }
                do throws(LinkError) { try await link.send(channel: number, readableValues[number] ?? []) } catch { return }
                continue
            }
            guard case .packet(let number, let payload) = request, let channel = SiliconLabsOTAChannel(rawValue: number), (offeredChannels ?? []).contains(number) else {
                continue
            }
            do throws(LinkError) {
                switch channel {
                case .control:
                    if let reboot = try await control(payload, link: link) {
                        await environment.reboot(reboot)
                        return
                    }
                case .data:
                    await data(payload, environment: environment)
                case .apploaderVersion, .otaVersion, .bootloaderVersion, .applicationVersion:
                    break
                }
            } catch { return }
        }
    }

    private func answer(_ error: SiliconLabsOTAError?, _ link: any Link) async throws(LinkError) {
        try await link.send(message: .writeResult(channel: SiliconLabsOTAChannel.control.rawValue, code: error?.rawValue ?? 0))
    }

    private func control(_ payload: ArraySlice<UInt8>, link: any Link) async throws(LinkError) -> RebootRequest? {
        guard mode == .bootloader else {
            // The application's in-place OTA component: acknowledge, close, reset into the AppLoader.
            try await answer(nil, link)
            appLoaderRequested = true
            return RebootRequest(toBootloader: true)
        }
        switch payload.count == 1 ? SiliconLabsOTAControl(rawValue: payload[payload.startIndex]) : nil {
        case .begin?:
            upload = Upload()
            verified = nil
            try await answer(nil, link)
        case .end?:
            guard let current = upload else {
                try await answer(.wrongState, link)
                return nil
            }
            let outcome = check(current)
            if outcome == nil { verified = Array(current.received.prefix((try? GeckoBootloaderImage(decoding: current.received))?.length ?? 0)) }
            upload = nil
            try await answer(outcome, link)
        case .close?:
            try await answer(nil, link)
            return verified != nil ? RebootRequest() : nil
        case nil:
            // Reserved values: the AppLoader refuses them as it refuses data out of turn.
            try await answer(.wrongState, link)
        }
        return nil
    }

    /// The AppLoader's verdict on a whole upload at 0x03: nil when it verifies.
    private func check(_ current: Upload) -> SiliconLabsOTAError? {
        if let error = current.error { return error }
        let image: GeckoBootloaderImage
        do { image = try GeckoBootloaderImage(decoding: current.received) } catch {
            return error.field == "end tag CRC-32" ? .crcError : .notSupported
        }
        guard image.applicationVersion != nil, !image.isEncrypted else { return .notSupported }
        guard image.programs.allSatisfy({ Int($0.address) + $0.length <= slotSize }) else { return .imageTooBig }
        return nil
    }

    private func data(_ payload: ArraySlice<UInt8>, environment: DeviceEnvironment) async {
        guard var current = upload else {
            // No begin on this connection: remembered for the next 0x03 (a write without response has no answer).
            upload = Upload(received: [], error: .wrongState)
            return
        }
        let before = current.received.count
        current.received += payload
        if current.received.count > slotSize + 4096, current.error == nil { current.error = .imageTooBig }
        upload = current
        // Programmed in place: past the header, the application tag and the first program tag's
        // header (64 bytes in a file `commander gbl create` makes), the old application is overwritten.
        if before < 64, current.received.count >= 64, application != nil {
            application = nil
        }
        if environment.writeTimePerByte > .zero { try? await environment.clock.sleep(for: environment.writeTimePerByte * payload.count) }
    }
}
