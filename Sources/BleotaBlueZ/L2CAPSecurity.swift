import BleotaLink
import CBlueZ
import Glibc
import Logging
import Synchronization

extension L2CAPSocket {
    /// The link's security level as the kernel has it now (`BT_SECURITY`).
    public func securityLevel() throws(SocketError) -> SecurityLevel {
        // struct bt_security { uint8_t level; uint8_t key_size; }
        let raw = try system.getOption(fd, level: SOL_BLUETOOTH, name: BT_SECURITY, size: 2)
        return raw.first.flatMap { SecurityLevel(rawValue: Int($0)) } ?? .low
    }

    /// Asks the kernel for `level`: it pairs, or encrypts with a key it holds. Returns at
    /// once; the socket sends nothing (and is not writable) until the link has it.
    func requestSecurity(_ level: SecurityLevel) throws(SocketError) {
        try system.setOption(fd, level: SOL_BLUETOOTH, name: BT_SECURITY, value: [level.kernelValue, 0])
    }
}

/// The security of an LE connection whose ATT channel is `socket`: raised by
/// setting `BT_SECURITY` on it, which makes the kernel encrypt with a key it
/// holds or start pairing, whose questions the ``KernelPairingAgent``
/// answers.
///
/// The kernel suspends the socket while it pairs and makes it writable again
/// once the link has the level; a pairing that fails without dropping the link
/// wakes nothing, which is why the wait also listens to the agent's
/// Authentication Failed events.
public final class L2CAPSecurity: LinkSecurityControl {
    let socket: L2CAPSocket
    let pairing: KernelPairingAgent?
    let clock: any BleotaClock
    /// Why pairing cannot be answered here, when no agent could be started.
    let unavailable: String?
    let storedBond: BondStore.Bond?
    let logger: Logger

    /// The Security Manager's own timeout is 30 s from its last PDU; a person typing a passkey gets that too.
    static let pairingTimeout = Duration.seconds(40)

    init(
        socket: L2CAPSocket, pairing: KernelPairingAgent?, unavailable: String?, storedBond: BondStore.Bond?, clock: any BleotaClock,
        logger: Logger
    ) {
        self.logger = logger
        self.socket = socket
        self.pairing = pairing
        self.unavailable = unavailable
        self.storedBond = storedBond
        self.clock = clock
    }

    var peer: BluetoothAddress { socket.peer.address }

    /// The agent's reason for a failed pairing with the peer, waiting up to `limit` for it.
    private func reportedFailure(within limit: Duration) async -> PairingError? {
        guard let pairing else { return nil }
        if let known = await pairing.failure(ifKnownFor: peer) { return known }
        let peer = self.peer
        return (try? await withDeadline(limit, clock: clock) { await pairing.failure(for: peer) }) ?? nil
    }

    /// What protects the link. The kernel reports the level it was asked for when it encrypts
    /// with a key it holds, which may be less than the key gives: an authenticated key makes an
    /// authenticated link, whatever was asked. So the level is the better of the two.
    public var security: LinkSecurityState {
        get async {
            let asked = (try? socket.securityLevel()) ?? .low
            guard asked > .low else { return .unencrypted }
            let kind = await pairing?.keyKind(for: peer)
            let keyLevel = kind?.level ?? storedBond?.level ?? asked
            let secureConnections = kind?.secureConnections ?? storedBond?.secureConnections
            let level = max(asked, keyLevel)
            if let method = await pairing?.method(for: peer) {
                return LinkSecurityState(level: level, method: method, secureConnections: secureConnections, bonded: true)
            }
            return LinkSecurityState(
                level: level, method: .storedKey, secureConnections: secureConnections,
                bonded: storedBond != nil || kind != nil)
        }
    }

    public func raiseSecurity(to level: SecurityLevel) async throws(PairingError) -> LinkSecurityState {
        let current: SecurityLevel
        do { current = try socket.securityLevel() } catch { throw .linkLost(error.description) }
        if current >= level { return await security }
        logger.debug("\(peer): raising security from \(current.name) to \(level.name)")
        await pairing?.expectPairing(with: peer)
        do { try socket.requestSecurity(level) } catch {
            // EINVAL: the kernel finds the link already secure enough (or cannot pair over it).
            if error.code == EINVAL, let now = try? socket.securityLevel(), now >= level { return await security }
            throw .linkLost("the kernel refused to raise security: \(error)")
        }
        enum Outcome: Sendable { case ready, failed(PairingError), timedOut }
        let outcome = await withTaskGroup(of: Outcome.self) { group -> Outcome in
            let socket = self.socket, pairing = self.pairing, peer = self.peer, clock = self.clock
            group.addTask {
                // Writable once the link has the level; an error or the socket closing wakes it too,
                // and what the link reached then says which.
                try? await socket.system.wait(socket.fd, writable: true)
                return .ready
            }
            if let pairing {
                group.addTask {
                    guard let failure = await pairing.failure(for: peer) else { return .timedOut }
                    return .failed(failure)
                }
            }
            group.addTask {
                try? await clock.sleep(for: Self.pairingTimeout)
                return .timedOut
            }
            let first = await group.next() ?? .timedOut
            group.cancelAll()
            return first
        }
        switch outcome {
        case .failed(let error):
            throw error
        case .timedOut:
            throw .timeout
        case .ready:
            let reached = try? socket.securityLevel()
            logger.debug("\(peer): security is now \(reached?.name ?? "unknown")")
            if let reached, reached >= level { return await security }
            // Woken without the level: the link dropped (or its socket closed) while pairing. The
            // agent's word on why can come just after the drop.
            if let failure = await reportedFailure(within: .seconds(2)) { throw failure }
            if pairing == nil, let unavailable { throw .unsupported(unavailable) }
            throw .linkLost("the link dropped while pairing")
        }
    }
}
