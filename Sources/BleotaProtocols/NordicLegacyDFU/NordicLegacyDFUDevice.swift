import BleotaCodec
import BleotaEngine
import BleotaLink

/// A board with Adafruit's nRF52 bootloader (legacy DFU, SDK 11) — the device
/// half of ``NordicLegacyDFUProtocol``. Its application offers the legacy
/// DFU service with revision 0x0001 and jumps to the bootloader, without an
/// answer and keeping its address, when 0x01 is written to the control point;
/// the bootloader (revision 0x0008, "AdaDFU") runs a ``NordicLegacyBootloader``.
/// Over a serial line it speaks the HCI/SLIP transport of `adafruit-nrfutil
/// dfu serial` (``NordicHCILink``), which carries no answers at all.
package actor NordicLegacyDFUDevice: DeviceHalf {
    package static let bootloaderName = "AdaDFU"
    /// The revision characteristic's values.
    package static let applicationRevision: UInt16 = 0x0001
    package static let bootloaderRevision: UInt16 = 0x0008

    package private(set) var bootloader: NordicLegacyBootloader
    private var inBootloader: Bool
    private var jumped = false

    package init(flash: NordicLegacyBootloader.Flash, startInBootloader: Bool = false) {
        bootloader = NordicLegacyBootloader(flash: flash)
        inBootloader = startInBootloader || flash.application == nil
    }

    package var mode: DeviceMode { inBootloader ? .bootloader : .application }

    package var firmware: FirmwareState { FirmwareState(running: flash.application, mode: mode) }
    package var bootloaderKeepsAddress: Bool { jumped }
    package var advertisedName: String? { inBootloader ? Self.bootloaderName : nil }
    package var flash: NordicLegacyBootloader.Flash { bootloader.flash }

    /// The revision characteristic, as `bleota serve` puts it in its GATT database for this connection.
    package var readableValues: [UInt8: [UInt8]] {
        let revision = inBootloader ? Self.bootloaderRevision : Self.applicationRevision
        return [NordicLegacyChannel.revision.rawValue: [UInt8(revision & 0xFF), UInt8(revision >> 8)]]
    }

    /// The application's version and the SHA-256 of its bytes, logged by `sim serve` at every reset.
    package var runningVersion: String {
        nordicRunningVersion(inBootloader: inBootloader, version: bootloader.flash.applicationVersion, application: bootloader.flash.application)
    }

    package func powerCycle() {
        inBootloader = enterBootloaderAtBoot || bootloader.flash.application == nil
        jumped = enterBootloaderAtBoot
        enterBootloaderAtBoot = false
        bootloader.restart()
    }

    /// GPREGRET 0xB1: set by the application's jump, read once at boot.
    private var enterBootloaderAtBoot = false

    private func reboot(into bootloaderMode: Bool, _ environment: DeviceEnvironment) async {
        enterBootloaderAtBoot = bootloaderMode
        await environment.reboot(RebootRequest(toBootloader: bootloaderMode))
    }

    package func serve(_ link: any Link, environment: DeviceEnvironment) async {
        link.deviceBooted()
        while true {
            let packet: ChannelMessage
            do { packet = try await link.receiveMessage() } catch { return }
            let cost = environment.processingTime(packet.framedSize)
            if cost > .zero { try? await environment.clock.sleep(for: cost) }
            do {
                if packet == .directoryQuery {
                    try await link.send(message: .directory(NordicLegacyChannel.allCases.map(\.rawValue)))
                    continue
                }
                if packet == .read(channel: NordicLegacyChannel.revision.rawValue) {
                    let revision = inBootloader ? Self.bootloaderRevision : Self.applicationRevision
                    try await link.send(channel: NordicLegacyChannel.revision.rawValue, [UInt8(revision & 0xFF), UInt8(revision >> 8)])
                    continue
                }
                guard case .packet(let channel, let payload) = packet, let kind = NordicLegacyChannel(rawValue: channel) else { continue }
                switch kind {
                case .revision:
                    // A read-only characteristic: a write to it is not the firmware's to see.
                    continue
                case .controlPoint where !inBootloader:
                    // The application's jump: no answer; the bootloader keeps the address (it has the peer's data).
                    if payload.first == NordicLegacyOperation.startDFU.rawValue {
                        await reboot(into: true, environment)
                        return
                    }
                case .controlPoint:
                    if try await perform(bootloader.control(Array(payload)), link: link, environment: environment) { return }
                case .packet where inBootloader:
                    let actions = bootloader.packet(Array(payload))
                    if actions.contains(.notify(.response(.startDFU, .success))) {
                        // The answer to Start waits for the erase of the whole bank.
                        let erase = environment.eraseTimePerPage * bootloader.pagesToErase
                        if erase > .zero { try? await environment.clock.sleep(for: erase) }
                    }
                    if try await perform(actions, link: link, environment: environment) { return }
                case .packet:
                    continue
                }
            } catch { return }
        }
    }

    /// Carries out the bootloader's actions; true when the device reset.
    private func perform(_ actions: [NordicLegacyBootloader.Action], link: any Link, environment: DeviceEnvironment) async throws(LinkError) -> Bool {
        for action in actions {
            switch action {
            case .notify(let notification):
                try await link.send(channel: NordicLegacyChannel.controlPoint.rawValue, notification.encode())
            case .activate, .reset:
                await reboot(into: false, environment)
                return true
            }
        }
        return false
    }
}

/// The legacy DFU service's characteristics as channels of a ``/BleotaLink/ChannelLink``.
package enum NordicLegacyChannel: UInt8, Sendable, Hashable, CaseIterable {
    /// 00001531-1212-EFDE-1523-785FEABCD123: written with response, notifying.
    case controlPoint = 0
    /// 00001532-…: written without response.
    case packet = 1
    /// 00001534-…: read (the value comes back as a packet on this channel).
    case revision = 2
}
