import ArgumentParser
import BleotaATT
import BleotaBlueZ
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation
import Logging
import Synchronization

/// `bleota serve`: this machine as an OTA target, from a real adapter.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Act as a device: serve every registered protocol's device half from a Bluetooth adapter in the peripheral role.",
        discussion: """
            Listens on the LE ATT channel of the adapter with a GATT server that offers the Generic \
            Access service and, for each protocol bleota knows (`bleota protocols`), its GATT service, behind \
            which run the same device halves the simulator uses. The adapter must be connectable and advertising \
            (e.g. `btmgmt -i hci1 connectable on; btmgmt -i hci1 advertising on`, or --advertise). Runs until interrupted, \
            or for --duration seconds.
            """
    )

    @OptionGroup var global: GlobalOptions
    @Option(name: .long, help: "The adapter to serve from (hci0, hci1, …).") var adapter: String = "hci0"
    @Option(name: .customLong("duration"), help: "Stop after this long, in seconds or with a unit (default: run until interrupted).", transform: TimeArgument.parse)
    var runTime: TimeArgument?
    var duration: Double? { runTime?.seconds() }
    @Option(name: .long, help: "The firmware version the served device starts with.") var version: String = "1.0.0"
    @Option(name: .long, help: "Bytes the served device's image slot holds.") var slot: Int = 1 << 20
    @Option(
        name: .long, help: "Also accept the first protocol that runs over credit-based channels on this LE PSM (0x80…0xFF).",
        transform: { text in
            let hex = text.lowercased().hasPrefix("0x")
            guard let psm = UInt16(hex ? String(text.dropFirst(2)) : text, radix: hex ? 16 : 10), (0x80...0xFF).contains(psm) else {
                throw ValidationError("--psm '\(text)' is out of range: LE dynamic PSMs are 0x80…0xFF")
            }
            return psm
        }) var psm: UInt16?
    @Option(name: .long, help: "Fault: drop the first connection after this many bytes reached the device (to exercise resume).")
    var disconnectAt: Int?
    @Option(
        name: .customLong("protocol-file"),
        help: ArgumentHelp("Also serve the protocol this description (YAML) describes (repeatable; protocols/ has Telink's and STM32WB's).", valueName: "FILE"))
    var protocolFiles: [String] = []
    @Option(
        name: .long,
        help: ArgumentHelp(
            "What the served characteristics demand of the link: low (nothing), medium (encrypted), high (authenticated pairing: passkey or numeric comparison) or fips (authenticated LE Secure Connections), as Zephyr's MCUmgr permissions do.",
            valueName: "LEVEL"),
        transform: { text in
            guard let level = SecurityLevel(name: text) else { throw ValidationError("--security '\(text)' is not \(SecurityLevel.names)") }
            return level
        }) var security: SecurityLevel = .low
    @OptionGroup var pairing: PairingOptions
    @Flag(
        help:
            "Advertise the first protocol's service, the name bleota-serve and the firmware version the device runs (manufacturer data, protocols/advertised-version.md; updated after an update) through the kernel's management interface (needs root; the kernel advertises again after each connection). Without it, advertising is left to the adapter's owner, e.g. btmgmt or bluetoothd."
    )
    var advertise = false
    @Option(
        name: .customLong("device-option"),
        help: ArgumentHelp(
            "A key of a served protocol's device, as in a sim:// address (repeatable; each protocol that has the key takes it; bleota sim presets lists them), e.g. images=2 for a two-core MCUboot device.",
            valueName: "KEY=VALUE"))
    var deviceOptions: [String] = []

    func validate() throws {
        if let runTime { _ = try runTime.checkedSeconds(option: "--duration", range: 0...31_536_000) }
        guard slot > 0 else { throw ValidationError("--slot \(slot) is out of range: use 1 or more bytes") }
    }

    func run() async throws {
        let logger = global.makeLogger("bleota.serve")
        let address = try requireBluetooth(adapter: adapter)
        let listener: L2CAPListener
        do {
            listener = try L2CAPSocket.listen(on: L2CAPAddress(address: address, type: .public, cid: L2CAPAddress.attChannel))
        } catch {
            throw CommandFailure(.bluetoothUnavailable, "cannot listen on \(adapter) (\(address)): \(error)")
        }
        // One device half per protocol with a GATT service, all behind one GATT server; each takes
        // the --device-option keys it has.
        let served = CommandContext.registry.protocols.filter { !$0.identity.gattServices.isEmpty }
        let given = try keyValueOptions(
            deviceOptions, option: "--device-option", example: "images=2",
            accepted: Array(Set(served.flatMap { $0.deviceOptions.map(\.key) })).sorted(), owner: "a served protocol's device")
        var hosted: [HostedDevice] = []
        var credit: (any DeviceHalf)?
        for updateProtocol in served {
            guard let service = updateProtocol.identity.gattServices.first else { continue }
            let keys = Set(updateProtocol.deviceOptions.map(\.key))
            let options: ProtocolOptions
            do { options = try ProtocolOptions(parsing: given.filter { keys.contains($0) }, updateProtocol.deviceOptions) } catch {
                throw CommandFailure(.usage, "--device-option \(error.key) \(error.problem)")
            }
            let configuration = DeviceConfiguration(
                name: "bleota-serve", initialVersion: version, slotSize: slot, bufferCount: 32,
                maximumPacket: 514, files: [DeviceConfiguration.welcomeFile.name: DeviceConfiguration.welcomeFile.bytes],
                options: options)
            let half: any DeviceHalf
            do { half = try updateProtocol.makeDevice(configuration) } catch {
                throw CommandFailure(.usage, "cannot make the \(updateProtocol.name) device: \(error)")
            }
            hosted.append(HostedDevice(service: service, half: half))
            if credit == nil, updateProtocol.identity.transports.contains(.creditChannel) { credit = half }
        }
        let devices = hosted
        let creditHalf = credit
        var listening: L2CAPListener?
        if let psm {
            do {
                listening = try L2CAPSocket.listen(on: L2CAPAddress(address: address, type: .public, psm: psm), receiveMTU: creditChannelMTU)
            } catch {
                throw CommandFailure(.bluetoothUnavailable, "cannot listen on PSM 0x\(String(psm, radix: 16)) of \(adapter): \(error)")
            }
        }
        let channel = listening
        // A protocol whose data may travel on a credit-based channel (SUOTA 1.2+) publishes its PSM
        // in a characteristic: listen there too, and hand each SDU to the device half serving that peer.
        let router = CreditChannelRouter()
        var routed: [(psm: UInt16, listener: L2CAPListener, name: String)] = []
        for device in devices {
            guard let route = device.service.creditChannel, let value = await device.half.readableValues[route.psmChannel], value.count >= 2 else { continue }
            let published = UInt16(value[0]) | UInt16(value[1]) << 8
            guard published != psm, !routed.contains(where: { $0.psm == published }) else { continue }
            do {
                let listener = try L2CAPSocket.listen(on: L2CAPAddress(address: address, type: .public, psm: published), receiveMTU: creditChannelMTU)
                routed.append((published, listener, device.service.name))
            } catch {
                Terminal.standardError.writeLine(
                    "warning: cannot listen on PSM 0x\(String(published, radix: 16)) for \(device.service.name) (\(error)); its hosts fall back to GATT")
            }
        }
        let routedListeners = routed
        // A device that demands security answers the central's pairing: the passkey it was given, or a comparison accepted.
        var pairingAgent: KernelPairingAgent?
        if security > .low {
            let answerer = await PairingService.shared.answerer(adapter: adapter, policy: pairing.policy, logger: logger)
            guard let agent = answerer.agent else {
                throw CommandFailure(.bluetoothUnavailable, "--security \(security.name) needs bleota to answer pairing on \(adapter): \(answerer.unavailable ?? "it cannot")")
            }
            pairingAgent = agent
        }
        let answering = pairingAgent, security = self.security
        Terminal.standardOutput.writeLine(
            "serving bleota on \(adapter) (\(address)), firmware \(version)" + (psm.map { ", PSM 0x\(String($0, radix: 16))" } ?? "")
                + (security > .low ? ", demanding security \(security.name) (IO capability \(pairing.policy.ioCapability))" : ""))
        @Sendable func running() async -> String { await devices.first?.half.runningVersion ?? version }
        // What the advertisement says the device runs: set again when an update changed it.
        let advertised = AdvertisedState()
        let advertising = advertise, adapter = self.adapter
        @Sendable func advertiseRunningVersion() async {
            guard advertising, let service = devices.first?.service.service else { return }
            let now = await running()
            guard advertised.version.withLock({ $0 }) != now else { return }
            do {
                try await Advertiser.start(adapter: adapter, name: "bleota-serve", service: service, version: MCUbootImage.Version(parsing: now))
                let first = advertised.version.withLock { previous in
                    defer { previous = now }
                    return previous == nil
                }
                Terminal.standardOutput.writeLine(
                    first
                        ? "advertising as \"bleota-serve\" with service \(service), version \(now)"
                        : "advertising version \(now)")
            } catch {
                Terminal.standardError.writeLine(
                    "warning: could not start advertising (\(error)); make \(adapter) advertise by other means, e.g. btmgmt -i \(adapter) advertising on")
            }
        }
        await advertiseRunningVersion()
        let clock = SystemClock()
        let fault = FaultBudget(disconnectAt: disconnectAt)
        // Structured: every connection is a child of the accept loop, every loop a child of this
        // command; stopping (or --duration running out) cancels them all and waits for them.
        await withDiscardingTaskGroup { group in
            group.addTask {
                await withDiscardingTaskGroup { connections in
                    while !Task.isCancelled {
                        guard let socket = try? await listener.accept() else { return }
                        Terminal.standardOutput.writeLine("ATT connection from \(socket.peer.address)")
                        // Each connection on its own task: one still winding down never delays the next.
                        connections.addTask {
                            await BLEPeripheralHost.serve(
                                socket: socket, devices: devices, name: "bleota-serve", clock: clock,
                                wrap: { FaultyLink($0, fault: fault) }, router: router, security: security, logger: logger)
                            if let agent = answering, let failure = await agent.failure(ifKnownFor: socket.peer.address) {
                                Terminal.standardOutput.writeLine("\(socket.peer.address): pairing failed: \(failure)")
                            }
                            Terminal.standardOutput.writeLine("\(socket.peer.address) disconnected; device runs \(await running())")
                            await advertiseRunningVersion()
                        }
                    }
                }
            }
            if let channel, let credit = creditHalf {
                group.addTask {
                    while !Task.isCancelled {
                        guard let socket = try? await channel.accept() else { return }
                        Terminal.standardOutput.writeLine("credit-based channel from \(socket.peer.address) on PSM 0x\(String(psm ?? 0, radix: 16))")
                        let link = FaultyLink(L2CAPLink(socket: socket, maximumPayload: creditChannelMTU, description: "coc"), fault: fault)
                        let environment = DeviceEnvironment(clock: clock) { _ in
                            await credit.powerCycle()
                            await link.close()
                        }
                        await credit.serve(link, environment: environment)
                    }
                }
            }
            for routedListener in routedListeners {
                group.addTask {
                    await withDiscardingTaskGroup { channels in
                        while !Task.isCancelled {
                            guard let socket = try? await routedListener.listener.accept() else { return }
                            let peer = socket.peer.address.description
                            Terminal.standardOutput.writeLine("\(routedListener.name) credit-based channel from \(peer) on PSM 0x\(String(routedListener.psm, radix: 16))")
                            channels.addTask {
                                let link = L2CAPLink(socket: socket, maximumPayload: creditChannelMTU, description: "coc")
                                // Each SDU goes to the device half serving the same peer over GATT.
                                while let sdu = try? await link.receive() {
                                    router.route(for: peer)?(sdu)
                                }
                                await link.close()
                            }
                        }
                    }
                }
            }
            if let duration {
                try? await clock.sleep(for: .milliseconds(Int(duration * 1000)))
                group.cancelAll()
            }
        }
        if advertise { await Advertiser.stop(adapter: adapter) }
        await PairingService.shared.stopAll()
        listener.close()
        channel?.close()
        for routedListener in routedListeners { routedListener.listener.close() }
        Terminal.standardOutput.writeLine("stopped; device runs \(await running())")
    }
}

/// The version `bleota serve --advertise` last put in its advertisement, shared by its connections.
private final class AdvertisedState: Sendable {
    let version = Mutex<String?>(nil)
}
