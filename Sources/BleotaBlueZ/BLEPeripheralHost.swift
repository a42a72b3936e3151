import BleotaATT
import BleotaEngine
import BleotaLink
import Logging
import Synchronization

/// A device half offered over GATT by `bleota serve`: the protocol's packet
/// service and what answers behind it.
public struct HostedDevice: Sendable {
    public var service: GATTPacketService
    public var half: any DeviceHalf
    public init(service: GATTPacketService, half: any DeviceHalf) {
        self.service = service
        self.half = half
    }
}

/// Where SDUs of a protocol's credit-based channel go (SUOTA's image data): to
/// the device half serving the same peer over GATT, tagged with the channel.
/// `bleota serve` accepts the channel on the PSM the device publishes and
/// looks the peer up here.
public final class CreditChannelRouter: Sendable {
    private let routes = Mutex<[String: @Sendable ([UInt8]) -> Void]>([:])

    public init() {}

    func register(peer: String, deliver: @escaping @Sendable ([UInt8]) -> Void) { routes.withLock { $0[peer] = deliver } }
    func remove(peer: String) { _ = routes.withLock { $0.removeValue(forKey: peer) } }

    /// Where `peer`'s SDUs go, if it has a GATT connection whose protocol takes them.
    public func route(for peer: String) -> (@Sendable ([UInt8]) -> Void)? { routes.withLock { $0[peer] } }
}

/// This machine as a peripheral: on one ATT connection, a GATT server with
/// the Generic Access service and every hosted device's packet service, each
/// served by its device half; a half that reboots drops its link and starts afresh.
///
/// With a `security` level, every protocol service's characteristics demand
/// it of the link, as Zephyr's MCUmgr transport demands an authenticated one
/// by default: the central must pair before it can subscribe or write.
public enum BLEPeripheralHost {
    public static func serve(
        socket: L2CAPSocket, devices: [HostedDevice], name: String, clock: any BleotaClock,
        wrap: @escaping @Sendable (any Link) -> any Link = { $0 }, router: CreditChannelRouter? = nil,
        security: SecurityLevel = .low, logger: Logger
    ) async {
        let peer = socket.peer.address.description
        let bearer = ATTBearer(link: L2CAPLink(socket: socket, maximumPayload: 517, description: "att"), clock: clock)
        let server = GATTServer(linkSecurity: {
            let level = (try? socket.securityLevel()) ?? .low
            if level < security { logger.debug("\(peer): the link is at security \(level.name), below the \(security.name) the device demands") }
            return level
        })
        server.addService(
            .bit16(0x1800),
            characteristics: [
                CharacteristicDefinition(uuid: .deviceName, properties: [.read], value: Array(name.utf8))
            ])
        server.attributeSecurity = security
        var makers: [(HostedDevice, @Sendable (ATTBearer) async -> any Link)] = []
        for device in devices {
            if device.service.channels.isEmpty {
                let make = GATTPeripheralLink.addPacketService(
                    to: server, service: device.service.service,
                    rx: device.service.write, tx: device.service.notify
                ).makeLink
                makers.append((device, { await make($0) }))
            } else {
                // The characteristics its firmware offers now: an application's and a bootloader's differ.
                let offered = await device.half.offeredChannels
                let channels = device.service.channels.filter { offered?.contains($0.number) ?? true }
                let half = device.half
                let make = GATTPeripheralChannelLink.addChannels(
                    channels, to: server, values: await half.readableValues,
                    liveValue: { number in await half.readableValues[number] })
                let route = device.service.creditChannel
                makers.append(
                    (
                        device,
                        { bearer in
                            let link = await make(bearer)
                            if let route, let router {
                                router.register(peer: peer) { sdu in link.deliver(sdu, on: route.channel) }
                            }
                            return link
                        }
                    ))
            }
        }
        await bearer.setServer(server)
        var built: [(HostedDevice, any Link)] = []
        for (device, makeLink) in makers { built.append((device, wrap(await makeLink(bearer)))) }
        let links = built
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await bearer.run()
                // The connection is gone: every device half stops waiting for packets.
                router?.remove(peer: peer)
                for (_, link) in links { await link.close() }
            }
            for (device, link) in links {
                group.addTask {
                    // A served device "reboots" by dropping the link and starting afresh.
                    let environment = DeviceEnvironment(clock: clock) { _ in
                        // Boot first, then drop the link: a client that reconnects at once meets the rebooted device.
                        await device.half.powerCycle()
                        let running = await device.half.runningVersion
                        logger.notice("\(device.service.name): the device reset; it runs \(running)")
                        await link.close()
                    }
                    await device.half.serve(link, environment: environment)
                }
            }
        }
    }
}
