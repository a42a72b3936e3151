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
            let configuration = DeviceConfiguration(
                name: "bleota-serve", initialVersion: version, slotSize: slot, bufferCount: 32,
                maximumPacket: 514, files: [DeviceConfiguration.welcomeFile.name: DeviceConfiguration.welcomeFile.bytes],
                options: given.filter { keys.contains($0.key) })
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

/// A one-shot fault for `bleota serve`: drop the link once after so many bytes.
final class FaultBudget: Sendable {
    private let remaining: Mutex<Int?>
    init(disconnectAt: Int?) { remaining = Mutex(disconnectAt) }

    /// Counts `bytes`; true exactly once, when the budget runs out.
    func spend(_ bytes: Int) -> Bool {
        remaining.withLock { value in
            guard let left = value else { return false }
            if left - bytes <= 0 {
                value = nil
                return true
            }
            value = left - bytes
            return false
        }
    }
}

/// Wraps a device-side link and drops it when the fault budget runs out.
final class FaultyLink: Link {
    let inner: any Link
    let fault: FaultBudget
    init(_ inner: any Link, fault: FaultBudget) {
        self.inner = inner
        self.fault = fault
    }
    var parameters: LinkParameters { inner.parameters }
    func send(_ packet: [UInt8]) async throws(LinkError) { try await inner.send(packet) }
    func receive() async throws(LinkError) -> [UInt8] {
        let packet = try await inner.receive()
        if fault.spend(packet.count) {
            await inner.close()
            throw .disconnected("simulated disconnect (--disconnect-at)")
        }
        return packet
    }
    func close() async { await inner.close() }
    func deviceBooted() { inner.deviceBooted() }
}

/// `bleota gatt …`: poke at a device's GATT database by hand.
struct GattCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt",
        abstract: "Discover, read and write a device's GATT attributes.",
        subcommands: [GattDiscover.self, GattRead.self, GattWrite.self, GattSubscribe.self]
    )
}

struct GattDevice: ParsableArguments {
    @Option(name: .long, help: "The device: ble://AA:BB:CC:DD:EE:FF[?type=random&adapter=hci0&security=medium&phy=2m&interval=7.5-15].") var device: String
    @Option(
        name: .customLong("connect-timeout"), help: "Time to wait for the connection, in seconds or with a unit (500ms; 0.1…3600 s, default 10 s).", transform: TimeArgument.parse)
    var connectTime = TimeArgument(seconds: 10)
    var connectTimeout: Double { connectTime.seconds() }
    @OptionGroup var pairing: PairingOptions

    /// What an operation's failure exits with: a pairing that failed is the pairing's status, anything else `status`.
    func failure(_ error: any Error, _ what: String, status: ExitStatus = .deviceError) -> CommandFailure {
        if case ATTBearerError.security(let pairingError) = error { return CommandFailure(.pairingFailed, "\(device): \(pairingError)") }
        return CommandFailure(status, "\(what): \(error)")
    }

    /// Closes the connection and says what protected it, when it was encrypted (on stderr, so values stay alone on stdout).
    func close(_ connection: ATTConnection, json: Bool) async -> LinkSecurityState? {
        let security = await connection.security.security
        await connection.close("done")
        await PairingService.shared.stopAll()
        guard security.level > .low else { return nil }
        if !json { Terminal.standardError.writeLine("link security: \(security)") }
        return security
    }

    func validate() throws {
        _ = try connectTime.checkedSeconds(option: "--connect-timeout", range: 0.1...3600)
    }

    func connect() async throws -> ATTConnection {
        guard case .success(let target) = BLEDeviceAddress.parse(device) else {
            if case .failure(let error) = BLEDeviceAddress.parse(device) { throw CommandFailure(.usage, error.description) }
            throw CommandFailure(.usage, "bad device")
        }
        _ = try requireBluetooth(adapter: target.adapter)
        do {
            let connection = try await ATTConnection.open(
                target, timeout: .milliseconds(Int64(connectTimeout * 1000)), clock: SystemClock(),
                pairing: pairing.policy)
            _ = try await connection.client.exchangeMTU()
            return connection
        } catch LinkError.security(let pairingError) {
            throw CommandFailure(.pairingFailed, "\(device): \(pairingError)")
        } catch {
            throw CommandFailure(.linkLost, "\(error)")
        }
    }
}

struct GattDiscover: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "discover", abstract: "List services, characteristics and descriptors.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: GattDevice

    struct Report: Codable {
        struct Characteristic: Codable {
            var uuid: String
            var handle: UInt16
            var properties: UInt8
            var descriptors: [String]
        }
        struct Service: Codable {
            var uuid: String
            var start: UInt16
            var end: UInt16
            var characteristics: [Characteristic]
        }
        var mtu: Int
        var connection: ConnectionSettings?
        var services: [Service]
        var security: LinkSecurityState?
    }

    func run() async throws {
        let connection = try await target.connect()
        var report = Report(mtu: await connection.bearer.mtu, connection: connection.settings, services: [])
        do {
            for service in try await connection.client.discoverPrimaryServices() {
                var entry = Report.Service(uuid: service.uuid.description, start: service.start, end: service.end, characteristics: [])
                for characteristic in try await connection.client.discoverCharacteristics(service) {
                    let descriptors = try await connection.client.discoverDescriptors(characteristic)
                    entry.characteristics.append(
                        .init(
                            uuid: characteristic.uuid.description, handle: characteristic.valueHandle,
                            properties: characteristic.properties.rawValue,
                            descriptors: descriptors.map { $0.uuid.description }))
                }
                report.services.append(entry)
            }
        } catch {
            await connection.close("done")
            throw target.failure(error, "discovery failed")
        }
        report.security = await target.close(connection, json: global.json)
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(report))
            return
        }
        var lines = ["MTU \(report.mtu)"]
        if let settings = report.connection {
            if !settings.summary.isEmpty { lines.append("link \(settings.summary)") }
            lines += settings.notes.map { "note: \($0)" }
        }
        for service in report.services {
            lines.append("service \(service.uuid) handles 0x\(String(service.start, radix: 16))–0x\(String(service.end, radix: 16))")
            for characteristic in service.characteristics {
                lines.append(
                    "  characteristic \(characteristic.uuid) value handle 0x\(String(characteristic.handle, radix: 16)) properties 0x\(String(characteristic.properties, radix: 16))"
                        + (characteristic.descriptors.isEmpty ? "" : " descriptors \(characteristic.descriptors.joined(separator: ", "))"))
            }
        }
        Terminal.standardOutput.writeLine(lines.joined(separator: "\n"))
    }
}

func parseHandle(_ text: String) throws -> UInt16 {
    let hex = text.lowercased().hasPrefix("0x")
    guard let value = UInt16(hex ? String(text.dropFirst(2)) : text, radix: hex ? 16 : 10), value > 0 else {
        throw ValidationError("'\(text)' is not an attribute handle: use 1…0xFFFF")
    }
    return value
}

struct GattWrite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "write", abstract: "Write an attribute's value (long values with prepare/execute).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: GattDevice
    @Option(name: .long, help: "The attribute handle (decimal or 0x-hex).", transform: parseHandle) var handle: UInt16
    @Option(name: .long, help: "The value as hex (e.g. 0100).") var hex: String
    @Flag(name: .long, help: "Write without response (a command; no acknowledgement).") var withoutResponse = false

    func validate() throws {
        guard [UInt8](hex: hex) != nil else { throw ValidationError("--hex '\(hex)' is not hex: write pairs of digits like 0a1b") }
    }

    func run() async throws {
        let value = [UInt8](hex: hex)!
        let connection = try await target.connect()
        do {
            if withoutResponse { try await connection.client.writeWithoutResponse(handle, value) } else { try await connection.client.write(handle, value) }
        } catch {
            await connection.close("done")
            throw target.failure(error, "write to handle 0x\(String(handle, radix: 16)) failed")
        }
        let security = await target.close(connection, json: global.json)
        if global.json {
            struct Output: Codable {
                var written: Int
                var security: LinkSecurityState?
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Output(written: value.count, security: security)))
        } else {
            Terminal.standardOutput.writeLine("wrote \(value.count) bytes to handle 0x\(String(handle, radix: 16))")
        }
    }
}

struct GattSubscribe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "subscribe", abstract: "Enable notifications (or indications) of a characteristic and print what arrives.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: GattDevice
    @Option(name: .long, help: "The characteristic's value handle (decimal or 0x-hex).", transform: parseHandle) var handle: UInt16
    @Flag(name: .long, help: "Ask for indications instead of notifications.") var indications = false
    @Option(name: .customLong("duration"), help: "Stop after this long, in seconds or with a unit (at most 86400 s, default 10 s).", transform: TimeArgument.parse) var runTime =
        TimeArgument(seconds: 10)
    var duration: Double { runTime.seconds() }
    @Option(name: .long, help: "Stop after this many values.") var count: Int?
    @Option(
        name: .customLong("write-handle"), help: "After subscribing, write --write-hex here without response (to send a request and watch its answer).",
        transform: parseHandle) var writeHandle: UInt16?
    @Option(name: .customLong("write-hex"), help: "The value to write to --write-handle, as hex.") var writeHex: String?

    func validate() throws {
        _ = try runTime.checkedSeconds(option: "--duration", range: 0...86_400)
        if let count, count < 1 { throw ValidationError("--count \(count) is out of range: use 1 or more") }
        if (writeHandle == nil) != (writeHex == nil) {
            throw ValidationError("--write-handle and --write-hex go together: give both or neither")
        }
        if let writeHex, [UInt8](hex: writeHex) == nil {
            throw ValidationError("--write-hex '\(writeHex)' is not hex: write pairs of digits like 0a1b")
        }
    }

    func run() async throws {
        let connection = try await target.connect()
        // The CCCD follows the value: discover it within the characteristic's range.
        let characteristic = GATTCharacteristic(
            uuid: .bit16(0), properties: [.notify], declaration: handle - 1,
            valueHandle: handle, end: min(0xFFFF, handle + 3))
        do { try await connection.client.subscribe(characteristic, indications: indications) } catch {
            await connection.close("done")
            throw target.failure(error, "cannot subscribe to handle 0x\(String(handle, radix: 16))")
        }
        if let writeHandle, let writeHex, let value = [UInt8](hex: writeHex) {
            do { try await connection.client.writeWithoutResponse(writeHandle, value) } catch {
                await connection.close("done")
                throw CommandFailure(.deviceError, "cannot write to handle 0x\(String(writeHandle, radix: 16)): \(error)")
            }
        }
        var received = 0
        let deadline = ContinuousClock.now + .milliseconds(Int64(duration * 1000))
        while ContinuousClock.now < deadline, count.map({ received < $0 }) ?? true {
            let left = deadline - ContinuousClock.now
            // try? flattens: nil on timeout, on a closed bearer, or at the end of the stream.
            guard let pdu = try? await withDeadline(left, clock: SystemClock(), operation: { try await connection.bearer.incoming.take() })
            else { break }
            switch pdu {
            case .handleValueNotification(let h, let value), .handleValueIndication(let h, let value):
                received += 1
                Terminal.standardOutput.writeLine(global.json ? #"{ "handle" : \#(h), "hex" : "\#(value.hexString)" }"# : "0x\(String(h, radix: 16)): \(value.hexString)")
            default:
                continue
            }
        }
        _ = await target.close(connection, json: global.json)
    }
}

struct GattRead: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "read", abstract: "Read an attribute's value (long values with Read Blob).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: GattDevice
    @Option(
        name: .long, help: "The attribute handle (decimal or 0x-hex).",
        transform: { text in
            guard let value = UInt16(text.lowercased().hasPrefix("0x") ? String(text.dropFirst(2)) : text, radix: text.lowercased().hasPrefix("0x") ? 16 : 10),
                value > 0
            else { throw ValidationError("'\(text)' is not an attribute handle: use 1…0xFFFF") }
            return value
        }) var handle: UInt16

    func run() async throws {
        let connection = try await target.connect()
        let value: [UInt8]
        do { value = try await connection.client.read(handle) } catch {
            await connection.close("done")
            throw target.failure(error, "read of handle 0x\(String(handle, radix: 16)) failed")
        }
        let security = await target.close(connection, json: global.json)
        if global.json {
            struct Output: Codable {
                var handle: UInt16
                var hex: String
                var text: String?
                var security: LinkSecurityState?
            }
            Terminal.standardOutput.writeLine(
                try JSONOutput.string(
                    Output(
                        handle: handle, hex: value.hexString, text: String(validating: value, as: UTF8.self),
                        security: security)))
        } else {
            Terminal.standardOutput.writeLine(value.hexString + (String(validating: value, as: UTF8.self).map { "  \"\($0)\"" } ?? ""))
        }
    }
}

/// The version `bleota serve --advertise` last put in its advertisement, shared by its connections.
private final class AdvertisedState: Sendable {
    let version = Mutex<String?>(nil)
}
