import BleotaATT
import BleotaLink
import Glibc
import Logging
import Synchronization

/// An ATT connection to a device over the LE fixed channel (CID 4): the
/// bearer, a GATT client on it, and the task that runs the bearer.
public struct ATTConnection: Sendable {
    public let bearer: ATTBearer
    public let client: GATTClient
    /// The task running the bearer: ``close(_:)`` waits for it.
    let runner: Task<Void, Never>
    /// What the PHY and interval ended up as, when the address asked for either.
    public let settings: ConnectionSettings?
    /// The LE connection's HCI handle, when the kernel told it.
    public let handle: UInt16?
    /// The connection's security, which the bearer raises when the device asks for more.
    public let security: L2CAPSecurity

    /// Connects once (no retries); the error says why it failed. `pairing` answers what a
    /// device that demands security asks (through the kernel's management interface).
    public static func open(
        _ target: BLEDeviceAddress, timeout: Duration, clock: any BleotaClock,
        pairing: any PairingAgent = PairingPolicy.justWorks,
        logger: Logger = Logger(label: "bleota.ble")
    ) async throws(LinkError) -> ATTConnection {
        guard let local = BluetoothAvailability.address(of: target.adapter) else {
            throw .unreachable(BluetoothAvailability.noAdapter(target.adapter).description)
        }
        // A device whose bond must exist is not connected to without one: the kernel would pair
        // it Just Works without asking anyone. (Beside bluetoothd the bonds are its own, and its
        // agent refuses to pair such a device instead.)
        if !pairing.pairsAnew, !BluetoothDaemon.isRunning,
            (try? BondStore().bonds(adapter: local))?.contains(where: { $0.identity.address == target.address }) != true
        {
            throw .security(.noBond)
        }
        // Before the connection exists: the kernel gives it the IO capability the agent sets.
        let answerer = await PairingService.shared.answerer(adapter: target.adapter, policy: pairing, logger: logger)
        let socket: L2CAPSocket
        do {
            socket = try await L2CAPSocket.connect(
                from: L2CAPAddress(address: local, type: .public, cid: L2CAPAddress.attChannel),
                to: L2CAPAddress(address: target.address, type: target.type, cid: L2CAPAddress.attChannel),
                security: target.security, timeout: timeout, clock: clock)
        } catch {
            if target.security > .low, let failure = await answerer.agent?.failure(ifKnownFor: target.address) {
                throw .security(failure)
            }
            throw .unreachable("cannot connect to \(target.address): \(error)")
        }
        let settings = await applyConnectionRequest(target, socket: socket)
        let bond = (try? BondStore().bonds(adapter: local))?.first { $0.identity.address == target.address }
        let security = L2CAPSecurity(
            socket: socket, pairing: answerer.agent, unavailable: answerer.unavailable, storedBond: bond, clock: clock,
            logger: logger)
        let bearer = ATTBearer(link: L2CAPLink(socket: socket, maximumPayload: 517, description: "att"), clock: clock, securityControl: security)
        let runner = Task { await bearer.run() }
        return ATTConnection(
            bearer: bearer, client: GATTClient(bearer: bearer), runner: runner, settings: settings,
            handle: socket.connectionHandle, security: security)
    }

    /// Connects, retrying until `timeout` passes: a link the kernel is still tearing
    /// down refuses for a moment, and a rebooting device is briefly absent.
    public static func openRetrying(
        _ target: BLEDeviceAddress, timeout: Duration, clock: any BleotaClock,
        pairing: any PairingAgent = PairingPolicy.justWorks,
        logger: Logger = Logger(label: "bleota.ble")
    ) async throws(LinkError) -> ATTConnection {
        try await retryUntil(deadline: clock.now + timeout, clock: clock, pause: .milliseconds(250)) { left throws(LinkError) in
            try await open(target, timeout: left, clock: clock, pairing: pairing, logger: logger)
        }
    }

    /// Closes the bearer and waits for the task that runs it.
    public func close(_ reason: String) async {
        await bearer.close(reason)
        await runner.value
    }

    /// The primary services the device's GATT database lists (after an MTU exchange); closes the connection.
    public func discoverServicesAndClose() async throws(ATTBearerError) -> [BluetoothUUID] {
        do {
            _ = try await client.exchangeMTU()
            let services = try await client.discoverPrimaryServices()
            await close("services discovered")
            return services.map(\.uuid)
        } catch {
            await close("discovery failed")
            throw error
        }
    }
}

/// Asks the controller for the PHY and interval `target` names, if any, on the
/// connection under `socket`. Never fails the connection: what could not be
/// done comes back as notes.
func applyConnectionRequest(_ target: BLEDeviceAddress, socket: L2CAPSocket) async -> ConnectionSettings? {
    guard !target.connection.isEmpty else { return nil }
    let adapterName = target.adapter ?? "the adapter"
    guard let handle = socket.connectionHandle else {
        return ConnectionSettings(notes: ["cannot find the connection's HCI handle, so the PHY and interval were left as they are"])
    }
    do {
        let controller = HCIController(transport: try RawHCISocket(adapter: target.adapter))
        return await ConnectionControl.apply(target.connection, handle: handle, adapterName: adapterName, controller: controller)
    } catch {
        return ConnectionSettings(notes: ["the PHY and interval were left as they are: \(error)"])
    }
}

/// The last connection settings a connector saw, for the final report.
public final class ConnectionSettingsRecord: Sendable {
    private let value = Mutex<ConnectionSettings?>(nil)
    public init() {}
    public func record(_ settings: ConnectionSettings?) { if let settings { value.withLock { $0 = settings } } }
    public var latest: ConnectionSettings? { value.withLock { $0 } }
}

/// The SDU size bleota asks for on credit-based channels.
public let creditChannelMTU = 1024

/// Connects to a real device, again after every reboot: to a protocol's GATT
/// packet service (discovered, subscribed, as a ``/BleotaATT/GATTLink``), or to its LE
/// credit-based channel when the address names a PSM and the protocol can
/// run over one (falling back to GATT when the device does not accept it).
///
/// On connecting it subscribes afresh — writing the CCC descriptor 0, then 1 —
/// which is what makes a Zephyr device drop a half-received SMP request it
/// would otherwise keep across connections.
public struct BLEConnector: SecurityRaisingConnector {
    public let target: BLEDeviceAddress
    public let clock: any BleotaClock
    public let description: String
    public let service: GATTPacketService
    public let allowsCreditChannel: Bool
    public let settings = ConnectionSettingsRecord()
    /// The security each link reached, and the pairing failure that ends connecting.
    public let security = ConnectionSecurityRecord()
    /// Answers what pairing asks.
    public let pairing: any PairingAgent
    /// The security every link is raised to before anything is written on it, set by
    /// ``raisingSecurity(to:)`` (the retry after a device answered nothing, ``/BleotaLink/SilentDropRecovery``).
    public private(set) var securityBeforeWriting: SecurityLevel = .low
    public let logger: Logger

    public init(
        target: BLEDeviceAddress, clock: any BleotaClock, description: String, service: GATTPacketService,
        allowsCreditChannel: Bool, pairing: any PairingAgent = PairingPolicy.justWorks, logger: Logger = Logger(label: "bleota.ble")
    ) {
        self.target = target
        self.clock = clock
        self.description = description
        self.service = service
        self.allowsCreditChannel = allowsCreditChannel
        self.pairing = pairing
        self.logger = logger
    }

    public func raisingSecurity(to level: SecurityLevel) -> BLEConnector {
        var raised = self
        raised.securityBeforeWriting = max(securityBeforeWriting, level)
        return raised
    }

    public func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        // A bootloader may advertise at address + 1 (Nordic's do, unless bonded): after a
        // jump look there first, otherwise at the address given; alternate until one answers.
        let next = Self.nextAddress(target)
        let candidates: [BLEDeviceAddress]
        switch purpose {
        case .initial: candidates = [target]
        // A private address changes as a whole: the next one is found by the IRK, not by adding one.
        case _ where ResolvablePrivateAddress.isResolvable(target.address) && target.type == .random: candidates = [target]
        case .bootloader: candidates = [next, target]
        case .application, .resume: candidates = [target, next]
        }
        return try await retryUntil(deadline: clock.now + timeout, clock: clock, pause: .milliseconds(250)) { left throws(LinkError) in
            try security.checkNotFailed()
            var lastError = LinkError.unreachable("no device at \(target.address)")
            for candidate in await advertisingFirst(candidates, within: min(left, .seconds(2))) {
                // An LE connection to an address nobody advertises waits out its whole timeout: bound it.
                let bounded = candidates.count > 1 ? min(left, .seconds(3)) : left
                do throws(LinkError) { return try await attempt(await located(candidate), timeout: bounded) } catch {
                    if case .security(let failure) = error {
                        security.record(failure)
                        throw error
                    }
                    lastError = error
                }
            }
            throw lastError
        }
    }

    /// `candidates` with the one a short scan finds advertising first. An LE connection to an
    /// address nobody advertises waits out its bound (3 s), so a jump to a bootloader that
    /// kept its address used to cost that much at address + 1 before the right one was tried;
    /// the scan ends at the first advertisement from either. As they are when it finds neither.
    func advertisingFirst(_ candidates: [BLEDeviceAddress], within duration: Duration) async -> [BLEDeviceAddress] {
        guard candidates.count > 1 else { return candidates }
        let addresses = Set(candidates.map(\.address.description))
        let seen = try? await Scanner.scan(adapter: target.adapter, duration: duration, active: false, stoppingAt: addresses)
        logger.debug(
            "a scan for \(addresses.sorted().joined(separator: " or ")) found \(seen.map { $0.isEmpty ? "neither" : $0.map(\.address).joined(separator: ", ") } ?? "nothing: it failed")"
        )
        guard let seen,
            let first = candidates.first(where: { candidate in seen.contains { $0.address == candidate.address.description } })
        else { return candidates }
        return [first] + candidates.filter { $0.address != first.address }
    }

    /// Scans for the device advertising `name` (2 s at a time) and connects to the address it advertises from.
    public func connect(for purpose: ConnectPurpose, timeout: Duration, advertisedName name: String) async throws(LinkError) -> any Link {
        try await retryUntil(deadline: clock.now + timeout, clock: clock, pause: .milliseconds(250)) { left throws(LinkError) in
            let seen: [Advertisement]
            do { seen = try await Scanner.scan(adapter: target.adapter, duration: min(left, .seconds(2)), filter: ScanFilter(name: name)) } catch {
                throw LinkError.unreachable("cannot scan for '\(name)': \(error)")
            }
            guard let found = seen.first(where: { $0.localName == name }), let address = BluetoothAddress(found.address) else {
                throw LinkError.unreachable("no device advertising the name '\(name)'")
            }
            var renamed = target
            renamed.address = address
            renamed.type = found.addressType == "random" ? .random : .public
            return try await attempt(renamed, timeout: left)
        }
    }

    /// Where to connect to a device that may advertise from a private address that changes (and
    /// changes again across a reset into its bootloader).
    ///
    /// With a bond whose IRK bleota keeps, the device is reached by its identity: bleota's agent
    /// loads every bond into the kernel (Load Identity Resolving Keys) before this returns, and a
    /// kernel that holds the IRK reports the device's advertising under the identity and connects
    /// to whichever private address it uses by then. Connecting to the private address a scan saw
    /// instead never completes, since the kernel no longer reports the device under it. Where
    /// the agent cannot load keys (beside bluetoothd, or without `CAP_NET_ADMIN`), a short scan
    /// finds the address the IRK resolves. Without such a bond, the address as it is.
    func located(_ candidate: BLEDeviceAddress) async -> BLEDeviceAddress {
        guard let adapterAddress = BluetoothAvailability.address(of: candidate.adapter) else { return candidate }
        let keys = ((try? BondStore().bonds(adapter: adapterAddress)) ?? []).compactMap(\.identityResolvingKey)
        // Named by its identity, or by a private address it used before (one its IRK resolves).
        if let key = keys.first(where: { $0.identity.address == candidate.address })
            ?? keys.first(where: { ResolvablePrivateAddress.resolves(candidate.address, irk: $0.value) })
        {
            let answerer = await PairingService.shared.answerer(adapter: candidate.adapter, policy: pairing, logger: logger)
            if let agent = answerer.agent, agent.loadsBonds {
                logger.info("\(key.identity.address) is bonded with its IRK: connecting to its identity, which the kernel resolves to the private address it uses now")
                return Self.identity(key.identity, of: candidate)
            }
            return await scanned(candidate, identity: key.identity, keys: [key])
        }
        // Beside bluetoothd the keys are its own, but the kernel holds them and reports the device under
        // the identity a pairing in this process revealed.
        if ResolvablePrivateAddress.isResolvable(candidate.address), candidate.type == .random,
            let identity = await PairingService.shared.answerer(adapter: candidate.adapter, policy: pairing, logger: logger).agent?
                .identity(of: candidate.address)
        {
            return await scanned(candidate, identity: identity, keys: [])
        }
        // A device bluetoothd bonded with is named by its identity; the kernel connects to it at the
        // private address it last saw it use, so a short scan lets it see the one in use now.
        if BluetoothDaemon.isRunning, !ResolvablePrivateAddress.isResolvable(candidate.address) || candidate.type == .public {
            return await scanned(candidate, identity: ManagementAddress(candidate.address, type: candidate.type), keys: [])
        }
        return candidate
    }

    /// `candidate` addressed by `identity` (an LE identity is public or static random).
    static func identity(_ identity: ManagementAddress, of candidate: BLEDeviceAddress) -> BLEDeviceAddress {
        var reached = candidate
        reached.address = identity.address
        reached.type = identity.kind == .lePublic ? .public : .random
        return reached
    }

    /// `candidate` at the address a short scan finds `identity` advertising from (resolved with `keys`, or by the kernel).
    private func scanned(_ candidate: BLEDeviceAddress, identity: ManagementAddress, keys: [IdentityResolvingKey]) async -> BLEDeviceAddress {
        let filter = ScanFilter(address: identity.address.description)
        guard let seen = try? await Scanner.scan(adapter: candidate.adapter, duration: .seconds(2), filter: filter, resolving: keys),
            let found = seen.first, let address = BluetoothAddress(found.address), address != candidate.address
        else { return candidate }
        logger.info("\(identity.address) advertises as \(address == identity.address ? "its private address (the kernel resolves it)" : address.description)")
        var located = candidate
        located.address = address
        located.type = found.addressType == "public" ? .public : .random
        return located
    }

    /// `link` with the connection's handle, so a fleet can change its interval (``IntervalControlledLink``);
    /// as it is when the kernel did not tell the handle. A credit-based channel may share its LE
    /// connection with the GATT link that opened it, so closing it leaves the connection up.
    func intervalControlled(_ link: any Link, handle: UInt16?, settings: ConnectionSettings?) -> any Link {
        guard let handle else { return link }
        let opening = settings?.intervalMilliseconds.map { Duration.microseconds(Int64(($0 * 1000).rounded())) }
        return IntervalControlledLink(link, handle: handle, adapter: target.adapter, openingInterval: opening)
    }

    /// A GATT link with its connection's handle, as above; closing it ends the LE connection under
    /// it at once (``IntervalControlledLink/close()``).
    func intervalControlled(_ link: any Link, connection: ATTConnection) -> any Link {
        guard let handle = connection.handle else { return link }
        let opening = connection.settings?.intervalMilliseconds.map { Duration.microseconds(Int64(($0 * 1000).rounded())) }
        let bearer = connection.bearer
        return IntervalControlledLink(
            link, handle: handle, adapter: target.adapter, openingInterval: opening, connectionIsUp: { await !bearer.isClosed })
    }

    /// The address + 1 a Nordic bootloader takes: the least significant byte incremented, wrapping without carry.
    static func nextAddress(_ target: BLEDeviceAddress) -> BLEDeviceAddress {
        var next = target
        var bytes = target.address.bytes
        if let last = bytes.indices.last { bytes[last] &+= 1 }
        next.address = BluetoothAddress(littleEndian: bytes.reversed())
        return next
    }

    private func attempt(_ target: BLEDeviceAddress, timeout: Duration) async throws(LinkError) -> any Link {
        if let psm = target.psm, allowsCreditChannel {
            // A credit-based channel carries the protocol's packets directly;
            // if the device does not accept it, fall back to GATT.
            if let link = await creditBasedChannel(psm: psm, timeout: timeout) { return link }
        }
        if let shared = try await throughDaemon(target) { return shared }
        let connection: ATTConnection
        do { connection = try await ATTConnection.open(target, timeout: timeout, clock: clock, pairing: pairing, logger: logger) } catch {
            // bluetoothd may have connected meanwhile (EBUSY): then share its link.
            if let shared = try await throughDaemon(target) { return shared }
            throw error
        }
        settings.record(connection.settings)
        try await secureBeforeWriting(connection)
        let link = try await setUpGATT(connection, target: target)
        let reached = await connection.security.security
        if reached.level > .low { security.record(reached) }
        return link
    }

    /// Pairs, or encrypts with the bond, before the first write (the CCC descriptor's included)
    /// when the user said the device pairs (`--passkey`, `--accept-pairing`), bleota keeps a bond
    /// with it, or this connector is the retry of a connect that went unanswered. Waiting for a
    /// refusal is not enough: a device that protects its characteristic but not its CCC
    /// descriptor refuses nothing and drops every Write Command.
    private func secureBeforeWriting(_ connection: ATTConnection) async throws(LinkError) {
        let level = SilentDropRecovery.levelBeforeWriting(
            asked: securityBeforeWriting, expectsPairing: pairing.expectsPairing, bonded: connection.security.storedBond != nil)
        guard level > .low else { return }
        do {
            let reached = try await connection.security.raiseSecurity(to: level)
            logger.debug("\(connection.security.peer): security \(reached.level.name) before writing")
        } catch {
            await connection.close("pairing failed")
            throw .security(error)
        }
    }

    /// Where bluetoothd already holds the link to the device (the kernel allows one ATT channel per
    /// link, so bleota's own would fail with EBUSY), the protocol's link through bluetoothd's GATT
    /// client (``BluetoothDaemonGATT``); nil where it does not.
    private func throughDaemon(_ target: BLEDeviceAddress) async throws(LinkError) -> (any Link)? {
        guard BluetoothDaemon.isRunning, let adapter = target.adapter ?? PairingService.adapterName(nil) else { return nil }
        guard await BluetoothDaemonGATT.holdsLink(adapter: adapter, device: target.address, logger: logger) else {
            logger.debug("bluetoothd runs but does not hold a resolved link to \(target.address)")
            return nil
        }
        // bluetoothd asks bleota's agent if the device wants the link paired.
        _ = await PairingService.shared.answerer(adapter: target.adapter, policy: pairing, logger: logger)
        logger.info("bluetoothd holds the link to \(target.address): sharing it through its GATT client (AcquireWrite/AcquireNotify)")
        return try await BluetoothDaemonGATT.link(
            adapter: adapter, device: target.address, service: service, description: description,
            logger: logger)
    }

    /// The protocol's link over `connection`'s GATT: discovered, subscribed (pairing on the way when the device demands it).
    private func setUpGATT(_ connection: ATTConnection, target: BLEDeviceAddress) async throws(LinkError) -> any Link {
        do {
            let mtu = try await connection.client.exchangeMTU()
            if !service.channels.isEmpty {
                // A protocol of several characteristics: whichever of them this device offers now.
                let connector = self
                let link = try await GATTChannelLink.open(
                    client: connection.client, channels: service.channels, mtu: mtu,
                    description: description, runner: connection.runner, creditRoute: service.creditChannel,
                    openCreditChannel: { psm throws(LinkError) in
                        try await connector.openCreditBasedChannel(psm: psm, timeout: .seconds(10))
                    })
                if link.channelCount == 0 {
                    await link.close()
                    throw LinkError.unreachable("\(target.address) does not offer the \(service.name) service \(service.service)")
                }
                return intervalControlled(link, connection: connection)
            }
            guard let found = try await connection.client.discoverPrimaryServices(service.service).first else {
                await connection.close("no \(service.name) service")
                throw LinkError.unreachable("\(target.address) does not offer the \(service.name) service \(service.service)")
            }
            let characteristics = try await connection.client.discoverCharacteristics(found)
            guard let rx = characteristics.first(where: { $0.uuid == service.write }),
                let tx = characteristics.first(where: { $0.uuid == service.notify })
            else {
                await connection.close("incomplete service")
                throw LinkError.unreachable("\(target.address)'s \(service.name) service lacks its characteristics")
            }
            try await connection.client.subscribe(tx, afresh: true)
            return intervalControlled(
                GATTLink(
                    client: connection.client, writeHandle: rx.valueHandle, notifyHandle: tx.valueHandle,
                    mtu: mtu, description: description, runner: connection.runner),
                connection: connection)
        } catch let error as LinkError {
            throw error
        } catch ATTBearerError.security(let failure) {
            await connection.close("pairing failed")
            throw .security(failure)
        } catch {
            await connection.close("\(error)")
            throw .unreachable("GATT setup with \(target.address) failed: \(error)")
        }
    }

    private func creditBasedChannel(psm: UInt16, timeout: Duration) async -> (any Link)? {
        try? await openCreditBasedChannel(psm: psm, timeout: timeout)
    }

    /// An LE credit-based channel to `psm` on the device (over the LE link already up, if any).
    func openCreditBasedChannel(psm: UInt16, timeout: Duration) async throws(LinkError) -> any Link {
        guard let local = BluetoothAvailability.address(of: target.adapter) else {
            throw .unreachable("\(target.adapter ?? "the adapter") has no address")
        }
        do {
            let socket = try await L2CAPSocket.connect(
                from: L2CAPAddress(address: local, type: .public),
                to: L2CAPAddress(address: target.address, type: target.type, psm: psm),
                security: target.security, receiveMTU: creditChannelMTU, timeout: timeout, clock: clock)
            // The peer's receive MTU bounds what we may send in one SDU.
            var sendMTU = 23
            if let raw = try? socket.system.getOption(socket.fd, level: 274, name: 12, size: 2), raw.count == 2 {
                sendMTU = Int(raw[0]) | Int(raw[1]) << 8
            }
            let applied = await applyConnectionRequest(target, socket: socket)
            settings.record(applied)
            return intervalControlled(
                L2CAPLink(socket: socket, maximumPayload: max(23, sendMTU), description: description + " (L2CAP CoC)"),
                handle: socket.connectionHandle, settings: applied)
        } catch {
            throw .unreachable("no credit-based channel on PSM 0x\(String(psm, radix: 16)) of \(target.address): \(error)")
        }
    }
}
