import ArgumentParser
import BleotaCodec
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import Foundation
import Logging
import Synchronization

/// `bleota sim serve`: a simulated MCUboot/SMP device in real time, over UDP
/// and a serial pseudo-terminal, for SMP clients that are not bleota.
struct SimServe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve a simulated MCUboot device over SMP in real time: UDP and/or a serial pseudo-terminal.",
        discussion: """
            Third-party MCUmgr clients run a whole upgrade against it: e.g. `smpmgr --ip 127.0.0.1 upgrade --confirm app.bin` \
            or `smpmgr --port /dev/pts/N …` with the path this prints. The device keeps its slots while it runs; \
            a reset takes --swap-time when a swap is pending, during which it does not answer.
            """)

    @OptionGroup var global: GlobalOptions
    @Option(name: .long, help: "Listen for SMP over UDP on HOST:PORT (default 127.0.0.1:1337 when --serial is not given).") var udp: String?
    @Flag(name: .long, help: "Serve SMP's console framing on a new pseudo-terminal; its path is printed.") var serial = false
    @Option(name: .long, help: "Also make this path a symlink to the pseudo-terminal.") var serialLink: String?
    @Option(name: .customLong("version"), help: "Version of the factory image in the primary slot.") var initialVersion = "1.0.0"
    @Option(name: .long, help: "The device's SMP buffer size (MCUmgr buf_size).") var buffer = 2475
    @Option(name: .long, help: "The device's SMP buffer count (MCUmgr buf_count).") var buffers = 4
    @Option(name: .long, help: "Milliseconds a reset with a pending swap keeps the device away.") var swapTime: Double = 1000
    @Option(name: .long, help: "Stop after this many seconds (default: run until interrupted).") var duration: Double?

    func validate() throws {
        guard (128...65_535).contains(buffer) else { throw ValidationError("--buffer \(buffer) is out of range: use 128…65535") }
        guard (1...64).contains(buffers) else { throw ValidationError("--buffers \(buffers) is out of range: use 1…64") }
        guard swapTime >= 0, swapTime.isFinite else { throw ValidationError("--swap-time cannot be negative") }
    }

    func run() async throws {
        let logger = global.makeLogger("bleota.sim.serve")
        let storage = SMPDeviceStorage(primary: SimulatedSMPDevice.factoryImage(version: SimulatedSession.mcubootVersion(initialVersion)))
        storage.withState { $0.files["/lfs/hello.txt"] = SimulatedSession.welcomeFile }
        let device = SMPDevice(storage: storage, parameters: MCUmgrParameters(bufferSize: buffer, bufferCount: buffers))
        let swap = Duration.milliseconds(Int64(swapTime))
        let clock = SystemClock()
        let rebooting = RebootWindow()

        var endpoints: [String: String] = [:]
        var server: UDPServerSocket?
        if udp != nil || !serial {
            let (host, port) = try Self.hostAndPort(udp ?? "127.0.0.1:1337")
            do { server = try UDPServerSocket(host: host, port: port) } catch { throw CommandFailure(.failure, "\(error)") }
            endpoints["udp"] = "\(host):\(server!.port)"
        }
        var terminal: PseudoTerminal?
        if serial {
            do { terminal = try PseudoTerminal.open() } catch { throw CommandFailure(.failure, "\(error)") }
            endpoints["serial"] = terminal!.path
            if let serialLink {
                try? FileManager.default.removeItem(atPath: serialLink)
                do { try FileManager.default.createSymbolicLink(atPath: serialLink, withDestinationPath: terminal!.path) } catch {
                    throw CommandFailure(.failure, "cannot link \(serialLink) to \(terminal!.path): \(error.localizedDescription)")
                }
            }
        }
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(endpoints))
        } else {
            for (kind, place) in endpoints.sorted(by: { $0.key < $1.key }) {
                Terminal.standardOutput.writeLine("serving SMP over \(kind) at \(place)")
            }
        }

        let environment = SMPDeviceEnvironment(clock: clock, swapTime: swap) {
            let swapping = storage.snapshot.pendingSwap != nil || !storage.snapshot.primaryConfirmed
            let outcome = storage.boot()
            logger.notice("reset: \(outcome)")
            rebooting.until(clock.now + .milliseconds(100) + (swapping ? swap : .zero))
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            if let server {
                group.addTask {
                    var reassemblers: [UDPServerSocket.Peer: SMPReassembler] = [:]
                    while let (bytes, peer) = try await server.receive() {
                        if rebooting.isAway(at: clock.now) { continue } // a resetting device hears nothing
                        var reassembler = reassemblers[peer] ?? SMPReassembler(limit: device.parameters.bufferSize + SMPHeader.size)
                        let messages = reassembler.feed(bytes)
                        reassemblers[peer] = reassembler
                        for message in messages {
                            guard let (response, after) = await device.respond(to: message, environment: environment) else { continue }
                            server.send(response.encode(), to: peer)
                            if after == .reset { await environment.reset() }
                        }
                    }
                }
            }
            if let terminal {
                group.addTask {
                    let link = SMPSerialLink(lines: SerialLineLink(fd: terminal.master, description: terminal.path, ownsDescriptor: true,
                                                                    isPseudoTerminalMaster: true))
                    let serialEnvironment = SMPDeviceEnvironment(clock: clock, swapTime: swap) {
                        await environment.reset()
                        try? await clock.sleep(until: rebooting.end)
                    }
                    while !Task.isCancelled {
                        await device.serve(link, environment: serialEnvironment)
                        // serve returns after a reset (the link stays: a serial port does not disconnect).
                        if Task.isCancelled { break }
                        try? await Task.sleep(for: .milliseconds(10))
                    }
                    await link.close()
                }
            }
            if let duration {
                group.addTask { try await Task.sleep(for: .milliseconds(Int64(duration * 1000))) }
                try await group.next()
                group.cancelAll()
                server?.close()
            } else {
                try await group.waitForAll()
            }
        }
        if let serialLink { try? FileManager.default.removeItem(atPath: serialLink) }
    }

    static func hostAndPort(_ text: String) throws -> (String, UInt16) {
        let address: SMPNetworkAddress
        do { address = try SMPNetworkAddress(parsing: "udp://" + text) } catch {
            throw ValidationError("--udp '\(text)' is not HOST:PORT: \(error)")
        }
        guard case .udp(let host, let port) = address else { throw ValidationError("--udp '\(text)' is not HOST:PORT") }
        return (host, port)
    }
}

/// When a resetting device is back.
final class RebootWindow: Sendable {
    private let endTime = Mutex<Duration>(.zero)
    func until(_ time: Duration) { endTime.withLock { $0 = time } }
    var end: Duration { endTime.withLock { $0 } }
    func isAway(at now: Duration) -> Bool { now < end }
}
