import BleotaLink
import BleotaProtocols

/// A device running bleota's native protocol in the simulator: the protocol's
/// device half (``NativeDevice``) on simulated flash, with the link model's
/// processing and erase times, advertising at `address` in its application
/// and at address + 1 in its bootloader, as Nordic's bootloaders do.
public final class SimulatedNativeDevice: SimulatedPeripheral {
    public let baseAddress: String
    public let device: NativeDevice
    public let model: LinkModel

    public init(address: String, storage: DeviceStorage, model: LinkModel) {
        baseAddress = address
        self.model = model
        device = NativeDevice(name: "bleota-sim", storage: storage, bufferCount: model.deviceBuffer,
                              maximumPacket: model.maximumPayload)
    }

    public var storage: DeviceStorage { device.storage }

    public var address: String {
        get async { await device.mode == .bootloader ? Self.increment(baseAddress) : baseAddress }
    }

    public var name: String {
        get async { await device.mode == .bootloader ? "bleota-dfu" : "bleota-sim" }
    }

    public func serve(_ link: any Link, world: SimulatedWorld) async {
        let model = self.model
        let environment = NativeDeviceEnvironment(
            clock: world.clock, processingTime: { model.processingTime(bytes: $0) },
            flashPageSize: model.flashPageSize, eraseTimePerPage: model.flashEraseTimePerPage
        ) { [self] _ in
            // Real firmware resets a moment after answering, so the answer gets out.
            try? await world.clock.sleep(for: model.connectionInterval * 4)
            await world.reboot(self)
        }
        await device.serve(link, environment: environment)
    }

    public func powerCycle() async { await device.boot() }

    /// `C0:FF:EE:00:00:01` → `C0:FF:EE:00:00:02` (the last byte wraps).
    static func increment(_ address: String) -> String {
        var parts = address.split(separator: ":").map(String.init)
        guard let last = parts.last, let value = UInt8(last, radix: 16) else { return address + "+1" }
        let next = String(value &+ 1, radix: 16, uppercase: true)
        parts[parts.count - 1] = next.count == 1 ? "0" + next : next
        return parts.joined(separator: ":")
    }
}

/// Finds the simulated device again after each reboot: at its own address, or
/// at address + 1 when it went to its bootloader.
public struct SimulatedConnector: DeviceConnector {
    public let world: SimulatedWorld
    public let address: String
    public let description: String

    public init(world: SimulatedWorld, address: String, description: String) {
        self.world = world
        self.address = address
        self.description = description
    }

    public func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        let candidates = purpose == .bootloader ? [SimulatedNativeDevice.increment(address), address]
                                                : [address, SimulatedNativeDevice.increment(address)]
        // Alternate between the addresses the device may use until one answers. No pause:
        // each connect waits up to 100 ms of virtual time for an advertisement.
        do {
            return try await retryingUntil(deadline: world.clock.now + timeout, clock: world.clock, pause: .zero) {
                _ throws(LinkError) in
                var lastError = LinkError.unreachable("no device at \(address)")
                for candidate in candidates {
                    do throws(LinkError) {
                        return try await world.connect(to: candidate, timeout: .milliseconds(100))
                    } catch {
                        lastError = error
                    }
                }
                throw lastError
            }
        } catch {
            throw error.lastError ?? .unreachable("no device at \(address)")
        }
    }
}
