import BleotaLink
import Logging

/// The pairing agents of this process: one ``KernelPairingAgent`` per adapter,
/// started before the first connection through it (the kernel gives each
/// connection the IO capability set when it is made, so the agent must come
/// first), or the reason none can be.
public actor PairingService {
    public static let shared = PairingService()

    /// An adapter's agent, or why pairing cannot be answered there.
    public struct Answerer: Sendable {
        public var agent: KernelPairingAgent?
        public var unavailable: String?
    }

    private var answerers: [UInt16: Answerer] = [:]

    /// The agent for `adapter` (`hciN`, or the first one), started with `policy` the first time.
    public func answerer(adapter: String?, policy: any PairingAgent, logger: Logger) async -> Answerer {
        guard let index = Self.controllerIndex(adapter) else {
            return Answerer(unavailable: "cannot tell which controller \(adapter ?? "the adapter") is")
        }
        if let known = answerers[index] {
            await known.agent?.answer(with: policy)
            return known
        }
        let answerer: Answerer
        if BluetoothDaemon.isRunning {
            answerer = Answerer(unavailable: "bluetoothd manages hci\(index) and answers its pairing requests itself: pair the device with bluetoothctl first (pair ADDRESS), or stop bluetoothd")
        } else {
            do {
                answerer = Answerer(agent: try await KernelPairingAgent.start(index: index, agent: policy, store: BondStore(), logger: logger))
            } catch {
                answerer = Answerer(unavailable: "\(error.description) (pairing needs CAP_NET_ADMIN: run as root or grant it)")
            }
        }
        if let unavailable = answerer.unavailable { logger.debug("pairing: \(unavailable)") }
        answerers[index] = answerer
        return answerer
    }

    /// Stops every agent (at the end of a command, so no socket outlives it).
    public func stopAll() async {
        for answerer in answerers.values { await answerer.agent?.stop() }
        answerers = [:]
    }

    /// `hci3` → 3; nil → the adapter the kernel would route through.
    static func controllerIndex(_ adapter: String?) -> UInt16? {
        var name = adapter
        if name == nil, case .available(let first) = BluetoothAvailability.probe(adapter: nil) { name = first }
        guard let name, name.hasPrefix("hci") else { return nil }
        return UInt16(name.dropFirst(3))
    }
}
