import BleotaLink
import Foundation
import Logging
import Synchronization

/// Pairs through the kernel's management interface, for machines where
/// bluetoothd does not run (headless gateways, CI): it sets the adapter up for
/// bonding (LE, bondable, Secure Connections, the IO capability its
/// ``/BleotaLink/PairingAgent`` can answer), loads the bonds bleota keeps so
/// links encrypt without pairing again, answers the kernel's User
/// Confirmation and User Passkey Requests through the agent, shows passkeys to
/// type, and keeps the keys a pairing makes in the ``BondStore``.
///
/// The kernel's own Security Manager does the pairing (a socket raising
/// `BT_SECURITY` starts it); this actor only answers its questions and learns
/// how it ended. Since Linux 5.8 even Just Works waits for a confirmation, so
/// without an answer here every pairing times out after 30 s.
public actor KernelPairingAgent {
    public nonisolated let index: UInt16
    public nonisolated let adapterAddress: BluetoothAddress
    let channel: ManagementChannel
    private(set) var agent: any PairingAgent
    let store: BondStore?
    let logger: Logger
    /// False beside bluetoothd: it answers the kernel (asking bleota's ``BluetoothDaemonAgent``) and
    /// keeps the keys; this agent then only watches how pairings go.
    let answers: Bool
    /// Whether it loaded bleota's bonds into the kernel (Load Long Term Keys, Load Identity Resolving
    /// Keys): the kernel then resolves a bonded device's private addresses itself.
    public nonisolated var loadsBonds: Bool { answers && store != nil }

    /// What happened while pairing with one device.
    struct Attempt {
        var method: PairingMethod?
        var failure: PairingError?
        var keys: [LongTermKey] = []
        var failureWaiters: [Mailbox<PairingError>] = []
    }
    private var attempts: [BluetoothAddress: Attempt] = [:]
    /// The identity a private address turned out to be (New Identity Resolving Key).
    private var identities: [BluetoothAddress: BluetoothAddress] = [:]
    /// The identity (with its type) each private address turned out to be.
    private var identityAddresses: [BluetoothAddress: ManagementAddress] = [:]
    /// The kind of the newest key the kernel made with each peer: what a link encrypted with it has.
    private var keyKinds: [BluetoothAddress: LongTermKey.Kind] = [:]
    private var eventTask: Task<Void, Never>?

    init(
        channel: ManagementChannel, index: UInt16, adapterAddress: BluetoothAddress, agent: any PairingAgent, store: BondStore?, logger: Logger,
        answers: Bool = true
    ) {
        self.answers = answers
        self.channel = channel
        self.index = index
        self.adapterAddress = adapterAddress
        self.agent = agent
        self.store = store
        self.logger = logger
    }

    /// Opens the management interface and sets controller `index` up for pairing with `agent`
    /// answering; with a `store`, loads its bonds for this adapter into the kernel first.
    ///
    /// Changes adapter-wide settings (bondable, Secure Connections, IO capability) and replaces
    /// the kernel's key lists: only for an adapter no bluetoothd manages.
    ///
    /// With `answers` false (beside bluetoothd) it changes nothing and answers nothing: it only
    /// watches the kernel's pairing events, to tell how a pairing went and why it failed.
    public static func start(
        index: UInt16, agent: any PairingAgent, store: BondStore?, logger: Logger,
        channel given: ManagementChannel? = nil, answers: Bool = true
    ) async throws(ManagementChannelError) -> KernelPairingAgent {
        let channel: ManagementChannel
        if let given { channel = given } else { channel = try ManagementChannel.open() }
        do {
            let information = try ControllerInformation(decoding: try await channel.send(.readControllerInformation, index: index))
            let pairing = KernelPairingAgent(
                channel: channel, index: index, adapterAddress: information.address, agent: agent,
                store: answers ? store : nil, logger: logger, answers: answers)
            if answers { try await pairing.configure(information) }
            await pairing.listen()
            return pairing
        } catch let error as ManagementError {
            channel.close()
            throw ManagementChannelError("cannot set hci\(index) up for pairing: \(error)")
        } catch {
            channel.close()
            throw ManagementChannelError("cannot set hci\(index) up for pairing: \(error)")
        }
    }

    private func configure(_ information: ControllerInformation) async throws {
        if !information.current.contains(.lowEnergy) { _ = try await channel.send(.setLowEnergy(true), index: index) }
        // The first management command on a controller turns bondable off: without it no key is kept.
        _ = try await channel.send(.setBondable(true), index: index)
        if information.supported.contains(.secureConnections), !information.current.contains(.secureConnections) {
            _ = try await channel.send(.setSecureConnections(true), index: index)
        }
        _ = try await channel.send(.setIOCapability(agent.ioCapability), index: index)
        if let store {
            let bonds = (try? store.bonds(adapter: information.address)) ?? []
            // Load IRKs even when there are none: it is what makes the kernel ask peers for their identity.
            _ = try await channel.send(.loadIdentityResolvingKeys(bonds.compactMap(\.identityResolvingKey)), index: index)
            _ = try await channel.send(.loadLongTermKeys(bonds.flatMap(\.longTermKeys)), index: index)
            if !bonds.isEmpty { logger.debug("loaded \(bonds.count) bond(s) into hci\(index)") }
        }
    }

    private func listen() {
        let events = channel.subscribe()
        eventTask = Task { [weak self] in
            while let (index, event) = try? await events.take() {
                guard let self else { return }
                await self.handle(event, index: index)
            }
        }
    }

    /// Answers with `newAgent` from now on, announcing its IO capability for connections made from now on.
    public func answer(with newAgent: any PairingAgent) async {
        let changed = newAgent.ioCapability != agent.ioCapability
        agent = newAgent
        if changed && answers { await reply(.setIOCapability(newAgent.ioCapability)) }
    }

    /// Keeps `failure` as the reason the pairing with `peer` failed (bluetoothd's agent refused it).
    public func record(_ failure: PairingError, for peer: BluetoothAddress) { fail(peer, failure) }

    /// Stops answering and closes the management socket.
    public func stop() {
        eventTask?.cancel()
        channel.close()
    }

    // MARK: What the socket side asks

    /// Starts watching a pairing with `peer`: earlier outcomes are forgotten.
    public func expectPairing(with peer: BluetoothAddress) {
        attempts[resolved(peer)] = Attempt()
    }

    /// How the last pairing with `peer` made its keys, when one ran.
    public func method(for peer: BluetoothAddress) -> PairingMethod? { attempts[resolved(peer)]?.method }

    /// The kind of the key this process saw the kernel make with `peer`, if it saw one.
    public func keyKind(for peer: BluetoothAddress) -> LongTermKey.Kind? { keyKinds[resolved(peer)] }

    /// Waits until a pairing with `peer` fails, and says why.
    public func failure(for peer: BluetoothAddress) async -> PairingError? {
        let key = resolved(peer)
        if let failure = attempts[key]?.failure { return failure }
        let mailbox = Mailbox<PairingError>()
        attempts[key, default: Attempt()].failureWaiters.append(mailbox)
        return try? await mailbox.take()
    }

    /// The identity the private address `address` turned out to be in a pairing this process saw, if it did.
    public func identity(of address: BluetoothAddress) -> ManagementAddress? { identityAddresses[address] }

    /// The failure of the last pairing with `peer`, if it failed, without waiting.
    public func failure(ifKnownFor peer: BluetoothAddress) -> PairingError? { attempts[resolved(peer)]?.failure }

    private func resolved(_ address: BluetoothAddress) -> BluetoothAddress { identities[address] ?? address }

    private func fail(_ peer: BluetoothAddress, _ error: PairingError) {
        let key = resolved(peer)
        var attempt = attempts[key, default: Attempt()]
        // The first reason is the one that says what went wrong (a refused comparison, not the failure it caused).
        if attempt.failure == nil { attempt.failure = error }
        let waiters = attempt.failureWaiters
        attempt.failureWaiters = []
        attempts[key] = attempt
        for waiter in waiters { waiter.put(attempt.failure ?? error) }
    }

    // MARK: Events

    func handle(_ event: ManagementEvent, index: UInt16) async {
        guard index == self.index else { return }
        if !answers {
            watch(event)
            return
        }
        switch event {
        case .userConfirmationRequest(let address, let justWorks, let value):
            let device = address.address.description
            var accept = true
            if justWorks {
                attempts[resolved(address.address), default: Attempt()].method = .justWorks
            } else {
                attempts[resolved(address.address), default: Attempt()].method = .numericComparison
                do {
                    accept = try await agent.confirm(value, for: device)
                    if !accept { fail(address.address, .comparisonRejected(value)) }
                } catch {
                    accept = false
                    fail(address.address, error)
                }
            }
            await reply(.userConfirmationReply(address, accept: accept))
        case .userPasskeyRequest(let address):
            attempts[resolved(address.address), default: Attempt()].method = .passkeyEntry
            var passkey: UInt32?
            do { passkey = try await agent.passkey(for: address.address.description) } catch { fail(address.address, error) }
            await reply(.userPasskeyReply(address, passkey: passkey))
        case .passkeyNotify(let address, let passkey):
            attempts[resolved(address.address), default: Attempt()].method = .passkeyEntry
            await agent.display(passkey, for: address.address.description)
        case .authenticationFailed(let address, let status):
            fail(address.address, .authenticationFailed("the kernel reports \(status)"))
        case .newLongTermKey(let storeHint, let key):
            attempts[resolved(key.peer.address), default: Attempt()].keys.append(key)
            keyKinds[resolved(key.peer.address)] = key.kind
            if storeHint, let store { keep { () throws(BondStore.Failure) in try store.add(key, adapter: adapterAddress) } }
        case .newIdentityResolvingKey(let storeHint, let rpa, let key):
            learnIdentity(rpa: rpa, key: key)
            if storeHint, let store { keep { () throws(BondStore.Failure) in try store.add(key, adapter: adapterAddress) } }
        default:
            break
        }
    }

    /// Beside bluetoothd: what each event says about the pairing, without answering anything.
    private func watch(_ event: ManagementEvent) {
        switch event {
        case .userConfirmationRequest(let address, let justWorks, _):
            attempts[resolved(address.address), default: Attempt()].method = justWorks ? .justWorks : .numericComparison
        case .userPasskeyRequest(let address), .passkeyNotify(let address, _):
            attempts[resolved(address.address), default: Attempt()].method = .passkeyEntry
        case .authenticationFailed(let address, let status):
            fail(address.address, .authenticationFailed("the kernel reports \(status)"))
        case .newLongTermKey(_, let key):
            keyKinds[resolved(key.peer.address)] = key.kind
        case .newIdentityResolvingKey(_, let rpa, let key):
            learnIdentity(rpa: rpa, key: key)
        default:
            break
        }
    }

    /// From now on the kernel names `rpa`'s device by its identity: so does everything kept about it.
    private func learnIdentity(rpa: BluetoothAddress, key: IdentityResolvingKey) {
        guard rpa != BluetoothAddress.any else { return }
        identities[rpa] = key.identity.address
        identityAddresses[rpa] = key.identity
        if let attempt = attempts.removeValue(forKey: rpa) { attempts[key.identity.address] = attempt }
        if let kind = keyKinds.removeValue(forKey: rpa) { keyKinds[key.identity.address] = kind }
    }

    private func keep(_ write: () throws(BondStore.Failure) -> Void) {
        do { try write() } catch { logger.warning("\(error)") }
    }

    private func reply(_ command: ManagementCommand) async {
        do { _ = try await channel.send(command, index: index) } catch {
            logger.warning("\(error)")
        }
    }
}

/// Whether bluetoothd runs on this machine: it then owns pairing (its agent) and
/// the kernel's key lists, and bleota must pair through it instead.
public enum BluetoothDaemon {
    public static var isRunning: Bool {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return false }
        for entry in entries where entry.first?.isNumber == true {
            if let name = try? String(contentsOfFile: "/proc/\(entry)/comm", encoding: .utf8),
                name.trimmingCharacters(in: .whitespacesAndNewlines) == "bluetoothd"
            {
                return true
            }
        }
        return false
    }
}
