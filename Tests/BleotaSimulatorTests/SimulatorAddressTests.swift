import Testing

@testable import BleotaSimulator

@Suite struct SimulatorAddressTests {
    @Test func presetWithoutKeys() throws {
        let address = try SimulatorAddress(parsing: "sim://2m-dle")
        #expect(address.preset == "2m-dle")
        #expect(address.model == LinkPreset.named("2m-dle")!.model)
        #expect(address.seed == 1)
    }

    @Test func everyKey() throws {
        let address = try SimulatorAddress(
            parsing:
                "sim://slow-flash?seed=7&loss=0.02&notify-loss=0.01&corrupt=0.001&duplicate=0.003&disconnect-at=5000&disconnect-time=2.5"
                + "&disconnect-prob=0.0001&power-loss-at=9000&reboot-at=12000&mtu=185&dle=100&phy=1m&interval=11.25&per-event=3"
                + "&buffer=9&processing=1.5&erase=40&reboot-time=250&slot=65536&version=2.1&protocol=native")
        #expect(address.seed == 7)
        #expect(address.faults.writeLoss == 0.02)
        #expect(address.faults.notificationLoss == 0.01)
        #expect(address.faults.corruption == 0.001)
        #expect(address.faults.duplication == 0.003)
        #expect(address.faults.disconnectAfterBytes == 5000)
        #expect(address.faults.disconnectAtTime == .milliseconds(2500))
        #expect(address.faults.disconnectProbability == 0.0001)
        #expect(address.faults.powerLossAfterBytes == 9000)
        #expect(address.faults.rebootAfterBytes == 12000)
        #expect(address.model.attMTU == 185)
        #expect(address.model.linkLayerPayload == 100)
        #expect(address.model.phy == .le1M)
        #expect(address.model.connectionInterval == .microseconds(11250))
        #expect(address.model.packetsPerEvent == 3)
        #expect(address.model.deviceBuffer == 9)
        #expect(address.model.deviceProcessingPerPacket == .microseconds(1500))
        #expect(address.model.flashEraseTimePerPage == .milliseconds(40))
        #expect(address.model.rebootTime == .milliseconds(250))
        #expect(address.slotSize == 65536)
        #expect(address.initialVersion == "2.1")
    }

    @Test(arguments: [
        ("sim://nope", "unknown simulator preset 'nope': use one of 1m-no-dle-30ms, 1m-dle-7.5ms, 2m-dle, linux-bluez, slow-flash"),
        (
            "sim://2m-dle?colour=red",
            "unknown sim:// key 'colour': use seed, loss, notify-loss, corrupt, duplicate, disconnect-at, disconnect-time, disconnect-prob, power-loss-at, reboot-at, mtu, dle, phy, interval, per-event, buffer, when-full, processing, erase, reboot-time, slot, version, security, device-io, device-passkey, legacy-pairing, ccc, protocol-file, protocol, smp-buffer, smp-buffers, swap-time, confirm-fails, reset-delay, stall-at, stall-time, decompress, slot-info, images, mcuboot-mode, decrypt-key, loader-name, nordic-hw, nordic-sd, nordic-key, nordic-bootloader, nordic-buttonless, nordic-start, nordic-save-progress, nordic-serial-mtu, legacy-sd, legacy-start, esp-window"
        ),
        ("sim://2m-dle?loss=1.5", "sim:// key 'loss' is a probability: use 0…1, got 1.5"),
        ("sim://2m-dle?loss=abc", "sim:// key 'loss' needs a number, got 'abc'"),
        ("sim://2m-dle?mtu=600", "mtu 600 is out of range: use 23…517"),
        ("sim://2m-dle?dle=300", "dle 300 is out of range: use 27…251"),
        ("sim://2m-dle?interval=8", "interval 8.0 ms is out of range: use 7.5…4000 ms in steps of 1.25 ms"),
        ("sim://2m-dle?phy=3m", "sim:// key 'phy' is 1m or 2m, got '3m'"),
        ("sim://2m-dle?seed=-1", "sim:// key 'seed' needs a whole number, got '-1'"),
        ("sim://2m-dle?buffer=0", "buffer 0 is out of range: use 1…1024"),
        ("sim://2m-dle?loss", "sim:// key 'loss' needs a value: write loss=VALUE"),
        (
            "sim://2m-dle?protocol=dfu",
            "sim:// protocol 'dfu' is not simulated: use protocol=native, protocol=smp, protocol=nordic-dfu, protocol=nordic-legacy, protocol=espressif-ota, protocol=suota, protocol=ti-oad or protocol=silabs-ota"
        ),
        ("sim://2m-dle?protocol=smp&smp-buffer=64", "sim:// smp-buffer 64 is out of range: use 128…65535"),
        ("sim://2m-dle?erase=-1", "sim:// key 'erase' cannot be negative"),
        ("udp://x", "'udp://x' is not a simulator address: use sim://PRESET?key=value"),
    ])
    func errorsNameTheProblemAndTheValidValues(address: String, message: String) {
        #expect(throws: SimulatorAddressError(message)) { try SimulatorAddress(parsing: address) }
    }
}
