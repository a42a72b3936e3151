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
        /// Answers on the management interface, or (beside bluetoothd) watches it.
        public var agent: KernelPairingAgent?
        public var unavailable: String?
        /// Beside bluetoothd: the agent it asks.
        public var daemon: BluetoothDaemonAgent?
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
            answerer = await Self.besideDaemon(index: index, policy: policy, logger: logger)
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

    /// Beside bluetoothd: an Agent1 it asks, and a management socket that only watches.
    static func besideDaemon(index: UInt16, policy: any PairingAgent, logger: Logger) async -> Answerer {
        let observer: KernelPairingAgent
        do { observer = try await KernelPairingAgent.start(index: index, agent: policy, store: nil, logger: logger, answers: false) } catch {
            return Answerer(unavailable: "\(error.description) (watching pairing needs CAP_NET_ADMIN: run as root or grant it)")
        }
        do {
            let daemon = try await BluetoothDaemonAgent.start(agent: policy, logger: logger) { peer, failure in
                await observer.record(failure, for: peer)
            }
            logger.info("bluetoothd manages hci\(index): pairing goes through it, with bleota as its agent")
            return Answerer(agent: observer, daemon: daemon)
        } catch {
            await observer.stop()
            return Answerer(unavailable: "bluetoothd manages hci\(index), and bleota cannot register as its pairing agent: \(error.description)")
        }
    }

    /// Stops every agent (at the end of a command, so no socket outlives it).
    public func stopAll() async {
        for answerer in answerers.values {
            await answerer.daemon?.stop()
            await answerer.agent?.stop()
        }
        answerers = [:]
    }

    /// `hciN` as given, or the adapter the kernel would route through.
    static func adapterName(_ adapter: String?) -> String? {
        if let adapter { return adapter }
        if case .available(let first) = BluetoothAvailability.probe(adapter: nil) { return first }
        return nil
    }

    /// `hci3` → 3; nil → the adapter the kernel would route through.
    static func controllerIndex(_ adapter: String?) -> UInt16? {
        var name = adapter
        if name == nil, case .available(let first) = BluetoothAvailability.probe(adapter: nil) { name = first }
        guard let name, name.hasPrefix("hci") else { return nil }
        return UInt16(name.dropFirst(3))
    }
}
