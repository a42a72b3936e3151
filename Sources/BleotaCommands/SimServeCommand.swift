import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaSimulator
import BleotaSystem
import Foundation
import Logging
import Synchronization

/// `bleota sim serve`: a simulated device in real time, over UDP and a serial
/// pseudo-terminal, for clients that are not bleota.
struct SimServe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve a simulated device in real time over UDP and/or a serial pseudo-terminal (default: an MCUboot device over SMP).",
        discussion: """
            Third-party clients run a whole update against it: e.g. `smpmgr --ip 127.0.0.1 upgrade --confirm app.bin` \
            or `smpmgr --port /dev/pts/N …` with the path this prints. The device keeps its state while it runs; \
            a reset takes --swap-time when a swap is pending, during which it does not answer. --protocol picks another \
            protocol that runs over UDP or serial (`bleota protocols`).
            """)

    @OptionGroup var global: GlobalOptions
    @OptionGroup var protocolOption: ProtocolChoice
    @Option(name: .long, help: "Listen over UDP on HOST:PORT (default 127.0.0.1:1337 when --serial is not given; port 0: free ports, printed).") var udp: String?
    @Flag(name: .long, help: "Serve on a new pseudo-terminal with the protocol's serial framing; its path is printed.") var serial = false
    @Option(name: .long, help: "Also make this path a symlink to the pseudo-terminal (removed on exit, signals included).") var serialLink: String?
    @Option(name: .customLong("firmware-version"), help: "Version of the factory image the device starts with (default 1.0.0).") var firmwareVersion: String?
    /// The name `--firmware-version` had in 0.1.0, kept for one release: `--version` elsewhere shows bleota's own version.
    @Option(name: .customLong("version"), help: .hidden) var deprecatedVersion: String?
    var initialVersion: String { firmwareVersion ?? deprecatedVersion ?? "1.0.0" }
    @Option(name: .customLong("smp-buffer"), help: "An SMP device's buffer size in bytes (MCUmgr's buf_size), as sim://…?smp-buffer=.")
    var smpBuffer: Int?
    @Option(name: .customLong("smp-buffers"), help: "An SMP device's buffer count (MCUmgr's buf_count), as sim://…?smp-buffers=.")
    var smpBuffers: Int?
    /// 0.1.0's names, kept for one release: `buffer=` in a sim:// address counts packets of the link model, not bytes.
    @Option(name: .customLong("buffer"), help: .hidden) var deprecatedBuffer: Int?
    @Option(name: .customLong("buffers"), help: .hidden) var deprecatedBuffers: Int?
    var buffer: Int? { smpBuffer ?? deprecatedBuffer }
    var buffers: Int? { smpBuffers ?? deprecatedBuffers }
    @Option(
        name: .long,
        help: "How long a reset with a pending swap keeps the device away, with its unit (300ms; default 1s). A bare number is milliseconds until the next release, then seconds.",
        transform: TimeArgument.parse)
    var swapTime: TimeArgument?
    @Option(name: .customLong("duration"), help: "Stop after this long, in seconds or with a unit (default: run until interrupted).", transform: TimeArgument.parse)
    var runTime: TimeArgument?
    var duration: Double? { runTime?.seconds() }
    @Option(name: .long, help: "Bytes the device's image slot holds (default 1 MiB).") var slot: Int?
    @Option(
        name: .long,
        help: ArgumentHelp(
            "Apply a simulator preset's BLE link model, in real time, to every client: PRESET[?loss=P&seed=N…] as in a sim:// address (air time, packets per event, the device's buffer and processing, loss). `kill -USR1` prints what crossed.",
            valueName: "PRESET")) var link: String?
    @Option(
        name: .customLong("udp-mtu"),
        help: ArgumentHelp(
            "Bytes of a UDP datagram the device reads (64…65507; default 1500, Zephyr's CONFIG_MCUMGR_TRANSPORT_UDP_MTU): a longer one reaches it cut short, as on Zephyr.",
            valueName: "BYTES"))
    var udpMTU: Int = 1500
    @Option(name: .long, help: "Serve this many independent devices (1…1000), on consecutive UDP ports from --udp's (a fleet for bleota fleet).")
    var devices: Int = 1
    @Option(name: .long, help: ArgumentHelp("Append one JSON line per device reset (device, its address, the version before and after) to this file.", valueName: "FILE"))
    var ledger: String?
    @Option(
        name: .customLong("device-option"),
        help: ArgumentHelp("A key of the protocol's simulated device, as in a sim:// address (repeatable; bleota sim presets lists them).", valueName: "KEY=VALUE"))
    var deviceOptions: [String] = []
    @Option(
        name: .customLong("power-loss"),
        help: ArgumentHelp(
            "A share of the devices (5%, or a count) loses power for good mid-update, --power-loss-at bytes into it, and never answers again: devices that fail late, for fleets and campaigns. Chosen by --power-loss-seed, named on stderr and in --ledger.",
            valueName: "SHARE"))
    var powerLoss: String?
    @Option(name: .customLong("power-loss-at"), help: ArgumentHelp("Bytes into its update a --power-loss device goes dark (default 20000).", valueName: "BYTES"))
    var powerLossAt: Int = 20_000
    @Option(name: .customLong("power-loss-seed"), help: "The seed that picks the --power-loss devices (default 1): the same seed picks the same ones.")
    var powerLossSeed: UInt64 = 1

    /// The devices --power-loss picks (0-based), from the seed: the same every run.
    func devicesLosingPower() throws -> Set<Int> {
        guard let powerLoss else { return [] }
        let count: Int
        if powerLoss.hasSuffix("%"), let percent = Double(powerLoss.dropLast()), percent > 0, percent <= 100 {
            count = Int((Double(devices) * percent / 100).rounded(.up))
        } else if let number = Int(powerLoss), number > 0, number <= devices {
            count = number
        } else {
            throw ValidationError("--power-loss '\(powerLoss)' is neither a share above 0 and at most 100 % nor a count of 1…\(devices) devices: write it as 1% or 3")
        }
        var order = Array(0..<devices)
        var random = SeededRandom(seed: powerLossSeed, stream: "sim-serve-power-loss")
        for index in stride(from: devices - 1, to: 0, by: -1) { order.swapAt(index, Int(random.next() % UInt64(index + 1))) }
        return Set(order.prefix(count))
    }

    func validate() throws {
        _ = try devicesLosingPower()
        guard powerLossAt >= 1 else { throw ValidationError("--power-loss-at \(powerLossAt) is out of range: use 1 byte or more") }
        if powerLoss == nil, powerLossAt != 20_000 { throw ValidationError("--power-loss-at needs --power-loss: give the share of devices, e.g. --power-loss 1%") }
        if let swapTime {
            guard swapTime.value >= 0 || !swapTime.value.isFinite else { throw ValidationError("--swap-time cannot be negative: use 0 or more, e.g. --swap-time 300ms") }
            _ = try swapTime.checkedSeconds(option: "--swap-time", range: 0...3600, bare: .milliseconds)
            if let warning = swapTime.legacyMillisecondsWarning(option: "--swap-time") { Terminal.standardError.writeLine(warning) }
        }
        if let runTime { _ = try runTime.checkedSeconds(option: "--duration", range: 0...31_536_000) }
        guard (64...65_507).contains(udpMTU) else { throw ValidationError("--udp-mtu \(udpMTU) is out of range: use 64…65507 bytes") }
        guard (1...1000).contains(devices) else { throw ValidationError("--devices \(devices) is out of range: use 1…1000") }
        if devices > 1 && serial { throw ValidationError("--serial serves one device: drop --devices, or serve the fleet over UDP") }
    }

    /// A protocol-neutral option of sim serve, by the name a protocol's device option gives for it
    /// (its `serveOption`).
    struct ServeOption {
        var flag: String
        var value: String
        /// Given on the command line, rather than sim serve's own default: a protocol with no use
        /// for a given option refuses it; a default one is left out.
        var given: Bool
    }

    var serveOptions: [ServeOption] {
        var options: [ServeOption] = [
            // sim serve's device swaps in 1 ms unless told otherwise (the protocol's own default is a real device's);
            // the device option counts milliseconds, as sim://…?swap-time= does.
            ServeOption(flag: "swap-time", value: String((swapTime?.seconds(bare: .milliseconds) ?? 1) * 1000), given: swapTime != nil)
        ]
        if let buffer { options.append(ServeOption(flag: "smp-buffer", value: String(buffer), given: true)) }
        if let buffers { options.append(ServeOption(flag: "smp-buffers", value: String(buffers), given: true)) }
        return options
    }

    func run() async throws {
        if deprecatedVersion != nil {
            Terminal.standardError.writeLine("warning: sim serve --version is now --firmware-version; the old name goes in the next release")
        }
        if deprecatedBuffer != nil || deprecatedBuffers != nil {
            Terminal.standardError.writeLine(
                "warning: sim serve --buffer and --buffers are now --smp-buffer and --smp-buffers, as the sim:// keys (buffer= there counts packets); the old names go in the next release"
            )
        }
        let logger = global.makeLogger("bleota.sim.serve")
        let registry = CommandContext.registry
        let updateProtocol: any UpdateProtocol
        do { updateProtocol = try registry.named(protocolOption.name, orDefaultOver: [.udp, .serial]) } catch {
            throw CommandFailure(.usage, error.description)
        }
        // Map the neutral options onto the protocol's own keys; one it has no use for is refused.
        var options = ProtocolOptionText()
        for option in serveOptions {
            if let spec = updateProtocol.deviceOptions.first(where: { $0.serveOption == option.flag }) {
                options[spec.key] = option.value
            } else if option.given {
                throw CommandFailure(.usage, "--\(option.flag) has no meaning for \(updateProtocol.identity.displayName)'s device: drop it")
            }
        }
        options = options.overridden(
            by: try keyValueOptions(
                deviceOptions, option: "--device-option", example: "nordic-hw=52",
                accepted: updateProtocol.deviceOptions.map(\.key),
                owner: "\(updateProtocol.identity.displayName)'s device"))
        // Parsed once, here: a value the device's option refuses is named by the flag it came with.
        let parsedOptions: ProtocolOptions
        do { parsedOptions = try ProtocolOptions(parsing: options, updateProtocol.deviceOptions) } catch {
            if let flag = updateProtocol.deviceOptions.first(where: { $0.key == error.key })?.serveOption, serveOptions.contains(where: { $0.flag == flag && $0.given }) {
                throw CommandFailure(.usage, "--\(flag) \(error.problem)")
            }
            throw CommandFailure(.usage, "--device-option \(error.key) \(error.problem)")
        }
        if let slot, !(1...Int(UInt32.max)).contains(slot) {
            throw CommandFailure(.usage, "--slot \(slot) is out of range: use 1…\(UInt32.max) bytes")
        }
        let shaping: SimulatorAddress?
        if let link {
            do { shaping = try SimulatorAddress(parsing: "sim://" + link) } catch {
                throw CommandFailure(.usage, "--link '\(link)': \(error)")
            }
            if shaping?.whenQueueFull == .hold {
                throw CommandFailure(.usage, "--link '\(link)': the shaped link drops what finds the device's queue full and cannot hold it: drop when-full=hold")
            }
        } else {
            shaping = nil
        }
        // Behind --link the device is the one a sim:// address of that preset makes: its buffer, and the
        // largest packet its BLE link carries (ATT MTU − 3), which it tells a client that asks (the native
        // HELLO's maxPacket). A client over UDP learns no MTU from its own link; without this it sent
        // packets that no BLE link of the preset carries in one write.
        var configuration = DeviceConfiguration(
            name: "bleota-sim", initialVersion: initialVersion, slotSize: slot ?? 1 << 20,
            files: [DeviceConfiguration.welcomeFile.name: DeviceConfiguration.welcomeFile.bytes],
            options: parsedOptions)
        if let model = shaping?.model {
            configuration.bufferCount = model.deviceBuffer
            configuration.maximumPacket = model.maximumPayload
        }
        let fleet: [any DeviceHalf]
        do throws(DeviceConfigurationError) {
            var made: [any DeviceHalf] = []
            for _ in 0..<devices { made.append(try updateProtocol.makeDevice(configuration)) }
            fleet = made
        } catch {
            if let flag = updateProtocol.deviceOptions.first(where: { $0.key == error.key })?.serveOption, serveOptions.contains(where: { $0.flag == flag && $0.given }) {
                throw CommandFailure(.usage, "--\(flag) \(error.problem)")
            }
            throw CommandFailure(.usage, "--device-option \(error.key) \(error.problem)")
        }
        let device = fleet[0]
        let clock = SystemClock()
        let windows = fleet.map { _ in RebootWindow() }
        let away = windows[0]
        let ledger = try self.ledger.map { path in
            do { return try ResetLedger(path: path) } catch { throw CommandFailure(.failure, "--ledger \(path): \(error)") }
        }
        // --power-loss: each chosen device's supply, cut for good once enough of an update reached it.
        let losing = try devicesLosingPower()
        let addressesForLoss = Mutex<[String]>([])
        let supplies: [PowerSupply?] = (0..<devices).map { index in
            guard losing.contains(index) else { return nil }
            let away = windows[index]
            return PowerSupply(cuttingAfter: powerLossAt) {
                // Not back within any run: a client waits for a device that does not come. (A day, not
                // "never": a deadline decades away was seen to stall every other timer of the process.)
                away.until(clock.now + .seconds(86_400))
                let address = addressesForLoss.withLock { $0.indices.contains(index) ? $0[index] : "device \(index + 1)" }
                logger.notice("device \(index + 1) (\(address)) lost power for good")
                ledger?.appendPowerLoss(device: index + 1, address: address)
            }
        }
        let shapedLinks = ShapedLinks()
        /// Serves the client's link as the device sees it: through the link model when --link is given.
        @Sendable func serving(_ link: any Link, _ body: @escaping @Sendable (any Link) async -> Void) async {
            guard let shaping else { return await body(link) }
            let shaped = ShapedLink(inner: link, model: shaping.model, faults: shaping.faults, seed: shaping.seed, clock: clock)
            shapedLinks.links.withLock { $0.append(shaped) }
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await shaped.run() }
                await body(shaped)
                await shaped.close()
            }
        }
        /// What the device pays per packet and per erase: the link model's device when --link is given.
        @Sendable func environment(_ reboot: @escaping @Sendable (RebootRequest) async -> Void) -> DeviceEnvironment {
            guard let model = shaping?.model else { return DeviceEnvironment(clock: clock, reboot: reboot) }
            return DeviceEnvironment(
                clock: clock, processingTime: { model.processingTime(bytes: $0) }, flashPageSize: model.flashPageSize,
                eraseTimePerPage: model.flashEraseTimePerPage, reboot: reboot)
        }
        let statisticsSignal =
            shaping == nil
            ? nil
            : ProcessSignals.observe(SIGUSR1) {
                for (index, shaped) in shapedLinks.links.withLock({ $0 }).enumerated() {
                    let statistics = shaped.statistics
                    Terminal.standardOutput.writeLine(
                        "link \(index + 1): \(statistics.messagesToDevice) messages (\(statistics.bytesToDevice) bytes) to the device, \(statistics.lostToDevice) lost, \(statistics.droppedByDeviceBuffer) dropped by its full buffer; \(statistics.messagesToClient) to the client, \(statistics.lostToClient) lost; \(statistics.connectionEvents) connection events"
                    )
                }
            }
        defer { statisticsSignal?.cancel() }

        // Installed before anything is printed: a client that reads the addresses may signal at once.
        let (stopRequested, requestStop) = AsyncStream.makeStream(of: Void.self)
        let interrupted = Mutex(false)
        ProcessSignals.interceptNextInterrupt {
            interrupted.withLock { $0 = true }
            requestStop.yield()
        }
        defer { ProcessSignals.stopInterceptingInterrupts() }
        var endpoints: [String: String] = [:]
        var opened: [UDPServerSocket] = []
        var udpHost = "127.0.0.1"
        if udp != nil || !serial {
            guard updateProtocol.identity.transports.contains(.udp) else {
                throw CommandFailure(.usage, "\(updateProtocol.identity.displayName) does not run over UDP: use --serial")
            }
            let (host, port) = try Self.hostAndPort(udp ?? "127.0.0.1:1337")
            udpHost = host == "0.0.0.0" ? "127.0.0.1" : host
            guard port == 0 || Int(port) + devices - 1 <= Int(UInt16.max) else {
                throw CommandFailure(.usage, "--devices \(devices) from port \(port) runs past 65535: start lower")
            }
            for index in 0..<devices {
                do {
                    var socket = try UDPServerSocket(host: host, port: port == 0 ? 0 : port + UInt16(index))
                    // A free port the system picks can be one an earlier device's socket already has (both
                    // allow address reuse): pick again, so every device has its own.
                    var tries = 0
                    while port == 0, opened.contains(where: { $0.port == socket.port }), tries < 100 {
                        let taken = socket
                        socket = try UDPServerSocket(host: host, port: 0)
                        taken.close()
                        tries += 1
                    }
                    opened.append(socket)
                } catch {
                    throw CommandFailure(.failure, "\(error)")
                }
            }
            endpoints["udp"] = "\(host):\(opened[0].port)"
        }
        let servers = opened
        var terminal: PseudoTerminal?
        var cleanup: TemporaryPaths?
        if serial {
            guard updateProtocol.identity.transports.contains(.serial) else {
                throw CommandFailure(.usage, "\(updateProtocol.identity.displayName) does not run over a serial port")
            }
            do { terminal = try PseudoTerminal.open() } catch { throw CommandFailure(.failure, "\(error)") }
            endpoints["serial"] = terminal!.path
            if let serialLink {
                try? FileManager.default.removeItem(atPath: serialLink)
                // Registered before it exists: a signal in between still removes it.
                cleanup = TemporaryPaths.removingOnExit([serialLink])
                do { try FileManager.default.createSymbolicLink(atPath: serialLink, withDestinationPath: terminal!.path) } catch {
                    cleanup?.keep()
                    throw CommandFailure(.failure, "cannot link \(serialLink) to \(terminal!.path): \(error.localizedDescription)")
                }
            }
        }
        defer { cleanup?.removeNow() }
        // Each device's address as clients give it (and the ledger records it).
        let addresses = servers.map { [udpHost] in "udp://\(udpHost):\($0.port)" }
        addressesForLoss.withLock { $0 = addresses }
        if !losing.isEmpty {
            Terminal.standardError.writeLine(
                "--power-loss: \(losing.count) device\(losing.count == 1 ? "" : "s") lose power for good \(powerLossAt) bytes into an update (seed \(powerLossSeed)): "
                    + losing.sorted().map { addresses.indices.contains($0) ? addresses[$0] : "device \($0 + 1)" }.joined(separator: ", "))
        }
        if devices > 1 {
            // One address a line: the list `bleota fleet` takes.
            if global.json {
                Terminal.standardOutput.writeLine(try JSONOutput.string(["udp": addresses]))
            } else {
                // The header on stderr: stdout is the device list itself, one address a line, for fleet --devices.
                Terminal.standardError.writeLine("serving \(devices) \(updateProtocol.name) devices over udp:")
                for address in addresses { Terminal.standardOutput.writeLine(address) }
            }
        } else if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(endpoints))
        } else {
            for (kind, place) in endpoints.sorted(by: { $0.key < $1.key }) {
                Terminal.standardOutput.writeLine("serving \(updateProtocol.name) over \(kind) at \(place)")
            }
        }

        /// A reset: the device boots (MCUboot swaps) and is away for a moment plus any swap.
        let places = servers.isEmpty ? [endpoints["serial"] ?? ""] : addresses
        @Sendable func reboot(_ request: RebootRequest, index: Int) async {
            let device = fleet[index], away = windows[index]
            // Away from the moment the reset begins: a client that reconnects at once (a new UDP
            // socket is a new peer) must not be answered by the device before it has restarted.
            away.until(clock.now + .seconds(3600))
            let before = await device.runningVersion
            await device.powerCycle()
            let version = await device.runningVersion
            logger.notice("reset\(devices > 1 ? " of device \(index + 1)" : ""): the device runs \(version)")
            ledger?.append(device: index + 1, address: places[index], before: before, after: version)
            away.until(clock.now + .milliseconds(100) + request.extraDowntime)
        }
        @Sendable func reboot(_ request: RebootRequest) async { await reboot(request, index: 0) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, server) in servers.enumerated() {
                let device = fleet[index], away = windows[index]
                group.addTask {
                    let (arrivals, arrived) = AsyncStream.makeStream(of: UDPPeerLink.self)
                    await withTaskGroup(of: Void.self) { peers in
                        peers.addTask {
                            defer { arrived.finish() }
                            try? await server.servePeers(clock: clock, receiveLimit: udpMTU) { arrived.yield($0) }
                        }
                        for await link in arrivals {
                            // Each client is served like a connection; after a reset the device serves it again once back.
                            peers.addTask {
                                // A new client is served after a connection's setup time, and not while the
                                // device restarts (over BLE it would find nothing to connect to). The setup
                                // time also covers the moment between a reply and the reset that follows it:
                                // a client that reconnects at once after ACTIVATE (a new UDP socket is a new
                                // peer) must not be answered by the bootloader that is about to reset.
                                _ = try? await clock.sleep(for: Self.connectionSetup)
                                if supplies[index]?.isCut == true { return }
                                _ = try? await clock.sleep(until: away.end)
                                // A device whose power was cut answers nobody again.
                                if supplies[index]?.isCut == true { return }
                                let served: any Link = supplies[index].map { PowerCutLink(inner: link, supply: $0) } ?? link
                                await serving(served) { client in
                                    while !Task.isCancelled {
                                        let environment = environment { request in
                                            await reboot(request, index: index)
                                            link.ignore(until: away.end)
                                        }
                                        await device.serve(client, environment: environment)
                                        guard !link.isClosed, (try? await clock.sleep(until: away.end)) != nil else { return }
                                    }
                                }
                            }
                        }
                        peers.cancelAll()
                    }
                }
            }
            if let terminal {
                group.addTask {
                    let lines = SerialLineLink(fd: terminal.master, description: terminal.path, ownsDescriptor: true, isPseudoTerminalMaster: true)
                    let link = updateProtocol.frame(serial: lines)
                    let environment = environment { request in await reboot(request) }
                    await serving(link) { client in
                        while !Task.isCancelled {
                            await device.serve(client, environment: environment)
                            // serve returns after a reset (the link stays: a serial port does not disconnect).
                            if Task.isCancelled { break }
                            try? await clock.sleep(until: max(away.end, clock.now + .milliseconds(10)))
                        }
                    }
                    await link.close()
                }
            }
            // Ctrl-C or SIGTERM stops serving as --duration does, and the command then exits 130 as
            // every interrupted command does (the signal's own status, 143 for SIGTERM, said nothing
            // the documentation promised); the serial link's symlink goes on the way out.
            group.addTask {
                for await _ in stopRequested { return }
            }
            if let duration {
                group.addTask { try await clock.sleep(for: .milliseconds(Int64(duration * 1000))) }
            }
            try await group.next()
            group.cancelAll()
            for server in servers { server.close() }
        }
        if interrupted.withLock({ $0 }) {
            throw CommandFailure(.interrupted, "interrupted: the simulated device\(devices > 1 ? "s" : "") stopped serving")
        }
    }

    /// How long a new UDP client waits before the device answers it: about what
    /// establishing a BLE connection takes.
    static let connectionSetup = Duration.milliseconds(50)

    static func hostAndPort(_ text: String) throws -> (String, UInt16) {
        // Port 0: free ports the system picks (printed), for tests and scripts.
        if text.hasSuffix(":0"), case let (host, _) = try hostAndPort(String(text.dropLast()) + "1") { return (host, 0) }
        let address: NetworkAddress
        do { address = try NetworkAddress(parsing: "udp://" + text) } catch {
            throw ValidationError("--udp '\(text)' is not HOST:PORT: \(error)")
        }
        guard case .udp(let host, let port, _) = address else { throw ValidationError("--udp '\(text)' is not HOST:PORT") }
        return (host, port)
    }
}

/// `sim serve --ledger`: one JSON line per device reset, and one per device that lost its power
/// for good (`--power-loss`), appended and flushed at once, so a test or benchmark can count how
/// often each device was updated (an update is one reset that changes what the device runs).
final class ResetLedger: Sendable {
    private let handle: Mutex<FileHandle>
    private let began = Date()

    init(path: String) throws {
        if !FileManager.default.fileExists(atPath: path) {
            guard FileManager.default.createFile(atPath: path, contents: nil) else { throw CocoaError(.fileWriteNoPermission) }
        }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seekToEnd()
        self.handle = Mutex(handle)
    }

    func append(device: Int, address: String, before: String, after: String) {
        write(Line(device: device, address: address, event: "reset", before: before, after: after))
    }

    /// `--power-loss`: the device went dark for good.
    func appendPowerLoss(device: Int, address: String) {
        write(Line(device: device, address: address, event: "power-loss"))
    }

    /// One line: `seconds` since `sim serve` started; `time`, the same moment as Unix time, lets a
    /// script set it against when its client started (scripts/peers-bench). A reset carries the
    /// versions before and after it.
    private struct Line: Codable {
        var device: Int
        var address: String
        var event: String
        var before: String?
        var after: String?
        var seconds = 0.0
        var time = 0.0
    }

    private func write(_ line: Line) {
        var line = line
        let now = Date()
        (line.seconds, line.time) = (now.timeIntervalSince(began), now.timeIntervalSince1970)
        guard let text = try? JSONOutput.string(line, pretty: false) else { return }
        handle.withLock { try? $0.write(contentsOf: Data((text + "\n").utf8)) }
    }
}

/// When a resetting device is back.
final class RebootWindow: Sendable {
    private let endTime = Mutex<Duration>(.zero)
    func until(_ time: Duration) { endTime.withLock { $0 = time } }
    var end: Duration { endTime.withLock { $0 } }
}

/// The links `sim serve --link` shaped, for the statistics `kill -USR1` prints.
final class ShapedLinks: Sendable {
    let links = Mutex<[ShapedLink]>([])
}
