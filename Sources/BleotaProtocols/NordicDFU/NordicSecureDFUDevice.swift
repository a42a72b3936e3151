import BleotaCodec
import BleotaEngine
import BleotaLink

/// An nRF5 device with the SDK 17.1 Secure DFU bootloader — the device half
/// of ``NordicSecureDFUProtocol``. In its application it offers a buttonless
/// DFU characteristic (unbonded, bonded or SDK 12's experimental one, or
/// none); in its bootloader the control point and packet characteristics,
/// answered by a ``NordicBootloader``. Over a serial line it is a UART/USB
/// bootloader speaking SLIP.
///
/// As on the real device: the buttonless jump answers, then resets into the
/// bootloader, which advertises at address + 1 (the same address after a
/// bonded jump) under "DfuTarg" or the name the host set; a completed update
/// resets into the new application; an image that fails its hash is never
/// activated, and the old application keeps running.
package actor NordicSecureDFUDevice: DeviceHalf {
    /// The buttonless characteristic the application offers.
    package enum Buttonless: String, Sendable, CaseIterable {
        case unbonded, bonded, experimental, none

        var channel: NordicDFUChannel? {
            switch self {
            case .unbonded: .buttonless
            case .bonded: .bondedButtonless
            case .experimental: .experimentalButtonless
            case .none: nil
            }
        }
    }

    package static let defaultBootloaderName = "DfuTarg"

    package private(set) var bootloader: NordicBootloader
    package nonisolated let buttonless: Buttonless
    /// The serial bootloader's MTU (Get MTU): 131 for the UART transport, 2051 for USB CDC.
    package nonisolated let serialMTU: UInt16
    private var inBootloader: Bool
    /// GPREGRET's "enter DFU" flag: set by a buttonless jump, read once at boot.
    private var enterBootloaderAtBoot = false
    private var bootloaderName = NordicSecureDFUDevice.defaultBootloaderName
    private var jumpedBonded = false

    package init(flash: NordicBootloader.Flash, buttonless: Buttonless = .unbonded, startInBootloader: Bool = false, serialMTU: UInt16 = 131) {
        bootloader = NordicBootloader(flash: flash)
        self.buttonless = buttonless
        self.serialMTU = serialMTU
        inBootloader = startInBootloader || flash.application == nil
    }

    package var mode: DeviceMode { inBootloader ? .bootloader : .application }

    package var firmware: FirmwareState { FirmwareState(running: flash.application, mode: mode) }

    /// The application's version and the SHA-256 of its bytes (Nordic devices have no way to
    /// read an image back, so `sim serve` logs this at every reset for scripts to check).
    package var runningVersion: String {
        nordicRunningVersion(inBootloader: inBootloader, version: bootloader.flash.applicationVersion, application: bootloader.flash.application)
    }

    package var bootloaderKeepsAddress: Bool { jumpedBonded }

    package var advertisedName: String? { inBootloader ? bootloaderName : nil }

    /// What is in flash now, for tests and `serve`'s messages.
    package var flash: NordicBootloader.Flash { bootloader.flash }

    package func powerCycle() {
        inBootloader = enterBootloaderAtBoot || bootloader.flash.application == nil
        if !enterBootloaderAtBoot { jumpedBonded = false }
        enterBootloaderAtBoot = false
        if !inBootloader { bootloaderName = Self.defaultBootloaderName }
        bootloader.restoreFromFlash()
    }

    package func serve(_ link: any Link, environment: DeviceEnvironment) async {
        // A connection starts from the settings page (nrf_bootloader.c reloads it on every disconnect).
        if inBootloader { bootloader.restoreFromFlash() }
        while true {
            let packet: ChannelMessage
            do { packet = try await link.receiveMessage() } catch { return }
            let cost = environment.processingTime(packet.framedSize)
            if cost > .zero { try? await environment.clock.sleep(for: cost) }
            if packet == .directoryQuery {
                do { try await link.send(message: .directory(channels)) } catch { return }
                continue
            }
            guard case .packet(let channel, let payload) = packet else { continue }
            // A serial line carries the control point alone; its bootloader also answers the serial-only requests.
            let serial = link.parameters.transport == .nordicSerial
            guard let kind = NordicDFUChannel(rawValue: channel), !serial || kind == .controlPoint else { continue }
            let reboot: RebootRequest?
            do throws(LinkError) {
                reboot =
                    inBootloader
                    ? try await bootloaderReceived(Array(payload), on: kind, link: link, serial: serial, environment: environment)
                    : try await applicationReceived(Array(payload), on: kind, link: link)
            } catch { return }
            if let reboot {
                await environment.reboot(reboot)
                return
            }
        }
    }

    package var offeredChannels: [UInt8]? { channels }

    private var channels: [UInt8] {
        if inBootloader { return [NordicDFUChannel.controlPoint.rawValue, NordicDFUChannel.packet.rawValue] }
        return buttonless.channel.map { [$0.rawValue] } ?? []
    }

    /// The application's buttonless service (`ble_dfu_unbonded.c`, `ble_dfu_bonded.c`, SDK 12's `ble_dfu.c`).
    private func applicationReceived(_ payload: [UInt8], on channel: NordicDFUChannel, link: any Link) async throws(LinkError) -> RebootRequest? {
        guard channel == buttonless.channel, let operation = payload.first else { return nil }
        func answer(_ status: NordicButtonless.Status) async throws(LinkError) {
            try await link.send(channel: channel.rawValue, NordicButtonless.response(to: operation, status))
        }
        switch operation {
        case NordicButtonless.enterBootloader:
            try await answer(.success)
            enterBootloaderAtBoot = true
            jumpedBonded = buttonless == .bonded
            return RebootRequest(toBootloader: true)
        case NordicButtonless.setAdvertisingName where buttonless == .unbonded:
            let length = payload.count > 1 ? Int(payload[1]) : 0
            guard (1...20).contains(length), payload.count == 2 + length,
                let name = String(validating: payload[2...], as: UTF8.self)
            else {
                try await answer(.invalidAdvertisingName)
                return nil
            }
            bootloaderName = name
            try await answer(.success)
            return nil
        default:
            try await answer(.operationNotSupported)
            return nil
        }
    }

    private func bootloaderReceived(
        _ payload: [UInt8], on channel: NordicDFUChannel, link: any Link, serial: Bool,
        environment: DeviceEnvironment
    ) async throws(LinkError) -> RebootRequest? {
        // Answers go back on the control point (on a serial line, its one channel).
        let answers = NordicDFUChannel.controlPoint.rawValue
        let actions: [NordicBootloader.Action]
        switch channel {
        case .controlPoint:
            let request: NordicDFURequest
            do { request = try NordicDFURequest(decoding: payload) } catch {
                // An unknown operation is "not supported"; a known one with bad parameters "invalid parameter".
                guard let code = payload.first else { return nil }
                let known = NordicDFUOperation(rawValue: code).flatMap { $0 == .response ? nil : $0 }
                let response = NordicDFUResponse(operation: known ?? .response, result: known == nil ? .operationNotSupported : .invalidParameter)
                var bytes = response.encode()
                bytes[1] = code
                try await link.send(channel: answers, bytes)
                return nil
            }
            if case .create(.data, let size) = request {
                // Creating a data object erases its pages first.
                let pages = (Int(size) + environment.flashPageSize - 1) / max(1, environment.flashPageSize)
                let erase = environment.eraseTimePerPage * pages
                if erase > .zero { try? await environment.clock.sleep(for: erase) }
            }
            actions = bootloader.handle(request, serial: serial, serialMTU: serialMTU)
        case .packet:
            guard !serial else { return nil }
            actions = bootloader.receiveData(payload)
        default:
            return nil
        }
        var reboot: RebootRequest?
        for action in actions {
            switch action {
            case .respond(let response):
                try await link.send(channel: answers, response.encode())
            case .activate(let activation):
                // The SoftDevice continuation: after a SoftDevice update the bootloader
                // waits for the application that goes with it.
                switch activation {
                case .softDevice, .softDeviceAndBootloader: enterBootloaderAtBoot = true
                case .application, .bootloader: enterBootloaderAtBoot = false
                }
                jumpedBonded = false
                reboot = RebootRequest()
            case .reset:
                reboot = RebootRequest()
            }
        }
        return reboot
    }
}
