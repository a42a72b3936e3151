/// A bad `sim://` address, said in one line with what is valid.
public struct SimulatorAddressError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// `sim://PRESET?key=value&…`: which link model, which faults, which device.
public struct SimulatorAddress: Sendable, Hashable {
    public var preset: String
    public var model: LinkModel
    public var faults: LinkFaults
    public var seed: UInt64
    /// The device's protocol: `native` (bleota's own) or `smp` (MCUmgr with MCUboot).
    public var deviceProtocol: String
    /// The SMP device's buffer size and count (its MCUmgr parameters).
    public var smpBufferSize = 2475
    public var smpBufferCount = 4
    /// How long an MCUboot swap keeps the SMP device away after a reset.
    public var swapTime: Duration = .seconds(2)
    /// Bytes the device's image slot holds.
    public var slotSize: Int
    /// The firmware version the simulated device starts with.
    public var initialVersion: String

    /// Every key the address accepts, with what it sets.
    public static let keys: [(key: String, meaning: String)] = [
        ("seed", "random seed (the same seed gives the same run)"),
        ("loss", "probability a host→device packet is lost (0…1)"),
        ("notify-loss", "probability a device→host packet is lost (0…1)"),
        ("corrupt", "probability a packet gets one bit flipped (0…1)"),
        ("duplicate", "probability a packet is delivered twice (0…1)"),
        ("disconnect-at", "drop the link once after this many host→device bytes"),
        ("disconnect-time", "drop the link once at this many seconds"),
        ("disconnect-prob", "per-packet probability the link drops (0…1)"),
        ("power-loss-at", "cut the device's power once after this many bytes"),
        ("reboot-at", "reboot the device once after this many bytes"),
        ("mtu", "ATT MTU (23…517)"),
        ("dle", "link-layer payload (27…251; 27 = no Data Length Extension)"),
        ("phy", "1m or 2m"),
        ("interval", "connection interval in ms (7.5…4000, steps of 1.25)"),
        ("per-event", "packets per connection event (1…64)"),
        ("buffer", "device receive buffer in packets (1…1024)"),
        ("processing", "device processing time per packet in ms"),
        ("erase", "flash page erase time in ms"),
        ("reboot-time", "device reboot time in ms"),
        ("slot", "device image slot size in bytes"),
        ("version", "firmware version the device starts with"),
        ("protocol", "device protocol: native or smp (MCUmgr/MCUboot)"),
        ("smp-buffer", "SMP device's buffer size in bytes (its MCUmgr buf_size, 128…65535)"),
        ("smp-buffers", "SMP device's buffer count (its MCUmgr buf_count, 1…64)"),
        ("swap-time", "MCUboot swap time in ms after a reset with an update pending"),
    ]

    public init(parsing text: String) throws(SimulatorAddressError) {
        guard text.hasPrefix("sim://") else {
            throw SimulatorAddressError("'\(text)' is not a simulator address: use sim://PRESET?key=value")
        }
        let rest = text.dropFirst("sim://".count)
        let parts = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let presetName = String(parts[0]).trimmingCharacters(in: ["/"])
        let names = LinkPreset.all.map(\.name).joined(separator: ", ")
        guard let preset = LinkPreset.named(presetName) else {
            throw SimulatorAddressError("unknown simulator preset '\(presetName)': use one of \(names)")
        }
        self.preset = preset.name
        model = preset.model
        faults = LinkFaults()
        seed = 1
        deviceProtocol = "native"
        slotSize = 1 << 20
        initialVersion = "1.0.0"
        guard parts.count == 2, !parts[1].isEmpty else { return }
        for pair in parts[1].split(separator: "&") {
            let keyValue = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = String(keyValue[0])
            guard keyValue.count == 2, !keyValue[1].isEmpty else {
                throw SimulatorAddressError("sim:// key '\(key)' needs a value: write \(key)=VALUE")
            }
            try apply(key: key, value: String(keyValue[1]))
        }
        try model.validate()
    }

    private mutating func apply(key: String, value: String) throws(SimulatorAddressError) {
        func number() throws(SimulatorAddressError) -> Double {
            guard let number = Double(value), number.isFinite else {
                throw SimulatorAddressError("sim:// key '\(key)' needs a number, got '\(value)'")
            }
            return number
        }
        func probability() throws(SimulatorAddressError) -> Double {
            let p = try number()
            guard (0...1).contains(p) else { throw SimulatorAddressError("sim:// key '\(key)' is a probability: use 0…1, got \(value)") }
            return p
        }
        func count() throws(SimulatorAddressError) -> Int {
            guard let n = Int(value), n >= 0 else {
                throw SimulatorAddressError("sim:// key '\(key)' needs a whole number of 0 or more, got '\(value)'")
            }
            return n
        }
        func milliseconds() throws(SimulatorAddressError) -> Duration {
            let ms = try number()
            guard ms >= 0 else { throw SimulatorAddressError("sim:// key '\(key)' cannot be negative") }
            return .microseconds(Int64((ms * 1000).rounded()))
        }
        switch key {
        case "seed":
            guard let seed = UInt64(value) else { throw SimulatorAddressError("sim:// key 'seed' needs a whole number, got '\(value)'") }
            self.seed = seed
        case "loss": faults.writeLoss = try probability()
        case "notify-loss": faults.notificationLoss = try probability()
        case "corrupt": faults.corruption = try probability()
        case "duplicate": faults.duplication = try probability()
        case "disconnect-at": faults.disconnectAfterBytes = try count()
        case "disconnect-time": faults.disconnectAtTime = try milliseconds() * 1000
        case "disconnect-prob": faults.disconnectProbability = try probability()
        case "power-loss-at": faults.powerLossAfterBytes = try count()
        case "reboot-at": faults.rebootAfterBytes = try count()
        case "mtu": model.attMTU = try count()
        case "dle": model.linkLayerPayload = try count()
        case "phy":
            guard let phy = LinkModel.PHY(rawValue: value.lowercased()) else {
                throw SimulatorAddressError("sim:// key 'phy' is 1m or 2m, got '\(value)'")
            }
            model.phy = phy
        case "interval": model.connectionInterval = try milliseconds()
        case "per-event": model.packetsPerEvent = try count()
        case "buffer": model.deviceBuffer = try count()
        case "processing": model.deviceProcessingPerPacket = try milliseconds()
        case "erase": model.flashEraseTimePerPage = try milliseconds()
        case "reboot-time": model.rebootTime = try milliseconds()
        case "slot":
            let size = try count()
            guard size > 0 else { throw SimulatorAddressError("sim:// key 'slot' must be at least 1 byte") }
            slotSize = size
        case "version": initialVersion = value
        case "protocol":
            guard value == "native" || value == "smp" else {
                throw SimulatorAddressError("sim:// protocol '\(value)' is not simulated: use protocol=native or protocol=smp")
            }
            deviceProtocol = value
        case "smp-buffer":
            let size = try count()
            guard (128...65_535).contains(size) else { throw SimulatorAddressError("sim:// smp-buffer \(size) is out of range: use 128…65535") }
            smpBufferSize = size
        case "smp-buffers":
            let buffers = try count()
            guard (1...64).contains(buffers) else { throw SimulatorAddressError("sim:// smp-buffers \(buffers) is out of range: use 1…64") }
            smpBufferCount = buffers
        case "swap-time": swapTime = try milliseconds()
        default:
            throw SimulatorAddressError("unknown sim:// key '\(key)': use \(Self.keys.map(\.key).joined(separator: ", "))")
        }
    }
}
