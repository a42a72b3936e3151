import BleotaCodec
import BleotaLink
import BleotaProtocols

/// A Zephyr/MCUboot device in the simulator: ``SMPDevice`` over the simulated
/// BLE link (the SMP characteristic: writes without response in, notifications
/// out), with flash write time from the link model and an MCUboot swap that
/// keeps the device away for `swapTime` after a reset that has one pending.
public final class SimulatedSMPDevice: SimulatedPeripheral {
    public let address: String
    public let device: SMPDevice
    public let model: LinkModel
    public let swapTime: Duration

    public init(address: String, storage: SMPDeviceStorage, model: LinkModel, parameters: MCUmgrParameters,
                swapTime: Duration = .seconds(2)) {
        self.address = address
        self.model = model
        self.swapTime = swapTime
        device = SMPDevice(name: "bleota-smp", storage: storage, parameters: parameters)
    }

    public var storage: SMPDeviceStorage { device.storage }
    public var name: String { "bleota-smp" }

    public func serve(_ link: any Link, world: SimulatedWorld) async {
        let model = self.model
        let swapTime = self.swapTime
        // Flash programming runs at roughly a page erase per page written.
        let perByte = model.flashPageSize > 0 ? model.flashEraseTimePerPage / model.flashPageSize : .zero
        let environment = SMPDeviceEnvironment(
            clock: world.clock, processingTime: { model.processingTime(bytes: $0) }, writeTimePerByte: perByte,
            swapTime: swapTime
        ) { [self] in
            try? await world.clock.sleep(for: model.connectionInterval * 4)
            let swapping = storage.snapshot.pendingSwap != nil || !storage.snapshot.primaryConfirmed
            await world.reboot(self, extraDowntime: swapping ? swapTime : .zero)
        }
        await device.serve(link, environment: environment)
    }

    public func powerCycle() async { storage.boot() }

    /// The factory image a simulated device starts with: a real (unsigned) MCUboot image.
    public static func factoryImage(version: MCUbootImage.Version, size: Int = 24 * 1024) -> [UInt8] {
        var generator = SeededRandom(seed: 0x5EED)
        let firmware = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return MCUbootImage.build(firmware: firmware, version: version)
    }
}
