import BleotaATT
import BleotaEngine
import BleotaLink

/// Any protocol's device half in the simulator: it advertises at its address
/// (at address + 1 while in its bootloader, as Nordic's bootloaders and
/// bleota's own do), pays the link model's processing and flash-erase times,
/// and reboots through the world, which takes it off the air for its reboot
/// time plus whatever the half asks for (an MCUboot swap).
public final class SimulatedDevice: SimulatedPeripheral {
    public let baseAddress: String
    public let half: any DeviceHalf
    public let model: LinkModel
    public let applicationName: String
    public let bootloaderName: String

    public let channelTagBytes: Int
    public let creditChannels: Set<UInt8>
    public let requestChannels: Set<UInt8>
    public let security: SimulatedDeviceSecurity
    public let whenQueueFull: FullQueueHandling

    /// `channelTagged`: the half speaks a protocol of several characteristics, whose packets carry a channel byte that costs no air time;
    /// `creditChannels`: those of its channels that travel on an LE credit-based channel;
    /// `requestChannels`: those the host writes with ATT Write Requests;
    /// `whenQueueFull`: what becomes of a write that finds its receive queue full, the half's own unless given.
    public init(
        address: String, half: any DeviceHalf, model: LinkModel, name: String = "bleota-sim", bootloaderName: String = "bleota-dfu",
        channelTagged: Bool = false, creditChannels: Set<UInt8> = [], requestChannels: Set<UInt8> = [], security: SimulatedDeviceSecurity = .open,
        whenQueueFull: FullQueueHandling? = nil
    ) {
        self.security = security
        self.whenQueueFull = whenQueueFull ?? half.whenQueueFull
        channelTagBytes = channelTagged ? 1 : 0
        self.creditChannels = channelTagged ? creditChannels : []
        self.requestChannels = channelTagged ? requestChannels : []
        baseAddress = address
        self.half = half
        self.model = model
        applicationName = name
        self.bootloaderName = bootloaderName
    }

    /// The device half of `updateProtocol`, its channels as the protocol's GATT services declare
    /// them: tagged when it has several, on a credit-based channel or written with requests as each says.
    public convenience init(
        address: String, half: any DeviceHalf, model: LinkModel, speaking updateProtocol: any UpdateProtocol,
        security: SimulatedDeviceSecurity = .open, whenQueueFull: FullQueueHandling? = nil
    ) {
        let services = updateProtocol.identity.gattServices
        self.init(
            address: address, half: half, model: model, channelTagged: services.contains { !$0.channels.isEmpty },
            creditChannels: Set(services.compactMap { $0.creditChannel?.channel }),
            requestChannels: Set(services.flatMap { $0.channels.filter { $0.write == .request }.map(\.number) }), security: security,
            whenQueueFull: whenQueueFull)
    }

    public var address: String {
        get async {
            guard await half.mode == .bootloader, await !half.bootloaderKeepsAddress else { return baseAddress }
            return Self.increment(baseAddress)
        }
    }

    public var name: String {
        get async {
            if let name = await half.advertisedName { return name }
            return await half.mode == .bootloader ? bootloaderName : applicationName
        }
    }

    public func serve(_ link: any Link, world: SimulatedWorld) async {
        let model = self.model
        let environment = DeviceEnvironment(
            clock: world.clock, processingTime: { model.processingTime(bytes: $0) },
            flashPageSize: model.flashPageSize, eraseTimePerPage: model.flashEraseTimePerPage
        ) { [self] request in
            // Real firmware resets a moment after answering, so the answer gets out.
            let delay = model.connectionInterval * 4
            world.goingDown(self, in: delay, extraDowntime: request.extraDowntime)
            try? await world.clock.sleep(for: delay)
            await world.reboot(self, extraDowntime: request.extraDowntime)
        }
        await half.serve(link, environment: environment)
    }

    public func powerCycle() async { await half.powerCycle() }

    /// `C0:FF:EE:00:00:01` → `C0:FF:EE:00:00:02` (the last byte wraps).
    public static func increment(_ address: String) -> String {
        var parts = address.split(separator: ":").map(String.init)
        guard let last = parts.last, let value = UInt8(last, radix: 16) else { return address + "+1" }
        let next = String(value &+ 1, radix: 16, uppercase: true)
        parts[parts.count - 1] = next.count == 1 ? "0" + next : next
        return parts.joined(separator: ":")
    }
}

/// Finds the simulated device again after each reboot: at its own address, or
/// at address + 1 when it went to its bootloader.
///
/// Each link it opens is subscribed to, as a GATT connector subscribes to the
/// protocol's notifications; a device that demands security refuses that until
/// the link is paired, so the connector pairs (with the world's pairing agent)
/// and subscribes again, as the ATT bearer does over a real link.
public struct SimulatedConnector: SecurityRaisingConnector {
    public let world: SimulatedWorld
    public let address: String
    public let description: String
    /// The security each link reached, and the pairing failure that ended connecting.
    public let security: ConnectionSecurityRecord
    /// The security every link is raised to before anything is written on it, as
    /// `BLEConnector`'s: at least medium when the world's agent expects pairing or holds a bond.
    public private(set) var securityBeforeWriting: SecurityLevel = .low

    public init(world: SimulatedWorld, address: String, description: String, security: ConnectionSecurityRecord = ConnectionSecurityRecord()) {
        self.world = world
        self.address = address
        self.description = description
        self.security = security
    }

    public func raisingSecurity(to level: SecurityLevel) -> SimulatedConnector {
        var raised = self
        raised.securityBeforeWriting = max(securityBeforeWriting, level)
        return raised
    }

    /// `link` once subscribed: paired before it when the user said the device pairs, a bond is
    /// kept, or this is a retry that asks it; and when the device refuses the subscription.
    func secured(_ link: SimulatedConnection.HostEnd) async throws(LinkError) -> any Link {
        do {
            let before = SilentDropRecovery.levelBeforeWriting(
                asked: securityBeforeWriting, expectsPairing: world.pairingAgent.expectsPairing, bonded: link.holdsBond)
            if before > .low { _ = try await link.raiseSecurity(to: before) }
            try await withSecurityOnDemand(control: link, shortfall: { (refusal: SecurityShortfall) in refusal }) {
                () async throws(SecurityShortfall) in try await link.subscribe()
            }
        } catch let error as PairingError {
            security.record(error)
            await link.close()
            throw .security(error)
        } catch {
            // Unreachable: the subscription throws only refusals, which pairing turns into PairingError.
            await link.close()
            throw .disconnected("\(error)")
        }
        security.record(await link.security)
        return link
    }

    /// Scans the world for the device advertising `name` and connects to it.
    public func connect(for purpose: ConnectPurpose, timeout: Duration, advertisedName name: String) async throws(LinkError) -> any Link {
        let world = self.world
        return try await retryUntil(deadline: world.clock.now + timeout, clock: world.clock, pause: world.model.connectionInterval * 4) { _ throws(LinkError) in
            try security.checkNotFailed()
            guard let found = await world.scan().first(where: { $0.name == name }) else {
                throw LinkError.unreachable("no device advertising the name '\(name)'")
            }
            return try await secured(world.connect(to: found.address, timeout: .milliseconds(100)))
        }
    }

    public func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        let candidates =
            purpose == .bootloader
            ? [SimulatedDevice.increment(address), address]
            : [address, SimulatedDevice.increment(address)]
        let world = self.world
        // Alternate between the addresses the device may use until one answers.
        return try await retryUntil(deadline: world.clock.now + timeout, clock: world.clock, pause: .zero) { _ throws(LinkError) in
            try security.checkNotFailed()
            var lastError = LinkError.unreachable("no device at \(candidates[0])")
            for candidate in candidates {
                let link: SimulatedConnection.HostEnd
                do throws(LinkError) { link = try await world.connect(to: candidate, timeout: .milliseconds(100)) } catch {
                    lastError = error
                    continue
                }
                return try await secured(link)
            }
            throw lastError
        }
    }
}
