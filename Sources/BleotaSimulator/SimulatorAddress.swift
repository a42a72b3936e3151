import BleotaEngine
import BleotaLink
import BleotaProtocols

/// A bad `sim://` address, said in one line with what is valid.
public struct SimulatorAddressError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// `sim://PRESET?key=value&…`: which link model, which faults, which device.
///
/// Keys are the simulator's own (link, faults, slot, version, protocol) plus
/// the device options of the protocols in the registry the address is parsed
/// against, which go to that protocol's device half as they are.
public struct SimulatorAddress: Sendable {
    public var preset: String
    public var model: LinkModel
    public var faults: LinkFaults
    public var seed: UInt64
    /// The device's protocol, as the address names it (`protocol=`); nil for the registry's default.
    public var deviceProtocol: String?
    /// Keys for the protocol's device half (its ``/BleotaEngine/UpdateProtocol/deviceOptions``).
    public var deviceOptions = ProtocolOptionText()
    /// Bytes the device's image slot holds.
    public var slotSize: Int
    /// The firmware version the simulated device starts with.
    public var initialVersion: String
    /// What the device demands of the link and how it pairs (`security=`, `device-io=`, …).
    public var deviceSecurity = SimulatedDeviceSecurity.open
    /// What becomes of a write that finds the device's queue full (`when-full=`); nil for what its
    /// firmware does (``/BleotaEngine/DeviceHalf/whenQueueFull``).
    public var whenQueueFull: FullQueueHandling?

    /// The simulator's own keys, with what they set.
    public static let simulatorKeys: [(key: String, meaning: String)] = [
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
        ("when-full", "a write that finds the device's buffer full is lost (drop) or waits on the link (hold); default: what the protocol's firmware does"),
        ("processing", "device processing time per packet in ms"),
        ("erase", "flash page erase time in ms"),
        ("reboot-time", "device reboot time in ms"),
        ("slot", "device image slot size in bytes"),
        ("version", "firmware version the device starts with"),
        ("security", "what the device demands of the link: none, encrypted (medium), authenticated (high) or secure-connections (fips)"),
        ("device-io", "what the device can do to pair: display (shows device-passkey), yesno, keyboard, keyboard-display or none"),
        ("device-passkey", "the six-digit passkey the device shows (default 123456)"),
        ("legacy-pairing", "1: the device can do only LE legacy pairing, not Secure Connections"),
        ("ccc", "open: the CCC descriptor takes a plain link's subscription, and writes below security= are dropped without a word"),
        ("protocol-file", "a protocol description (YAML) the device speaks, as `--protocol-file` reads it"),
    ]

    /// Every key an address accepts with `registry`'s protocols, with what it sets.
    public static func keys(_ registry: ProtocolRegistry = .builtIn) -> [(key: String, meaning: String)] {
        var keys = simulatorKeys
        keys.append(
            (
                "protocol",
                "device protocol: "
                    + registry.protocols.filter { $0.identity.transports.contains(.simulator) }
                    .map { "\($0.name) (\($0.identity.displayName))" }.joined(separator: ", ")
            ))
        for (_, option) in registry.deviceOptions where !keys.contains(where: { $0.key == option.key }) {
            keys.append((option.key, option.meaning))
        }
        return keys
    }

    /// The protocol the address's device speaks.
    public func updateProtocol(in registry: ProtocolRegistry = .builtIn) -> (any UpdateProtocol)? {
        if let describedProtocol, registry.named(describedProtocol.name) == nil { return describedProtocol }
        return deviceProtocol.map { registry.named($0) } ?? registry.defaultProtocol
    }

    /// A protocol read from the `protocol-file=` the address names, when the registry did not have it.
    public var describedProtocol: DescribedProtocol?

    public init(parsing text: String, registry: ProtocolRegistry = .builtIn) throws(SimulatorAddressError) {
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
        slotSize = 1 << 20
        initialVersion = "1.0.0"
        guard parts.count == 2, !parts[1].isEmpty else { return }
        for pair in parts[1].split(separator: "&") {
            let keyValue = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = String(keyValue[0])
            guard keyValue.count == 2, !keyValue[1].isEmpty else {
                throw SimulatorAddressError("sim:// key '\(key)' needs a value: write \(key)=VALUE")
            }
            try apply(key: key, value: String(keyValue[1]), registry: registry)
        }
        try model.validate()
        // Keys only one protocol's device takes name that protocol (swap-time: SMP's).
        if deviceProtocol == nil, !deviceOptions.isEmpty {
            let owners = registry.protocols.filter { item in
                item.identity.transports.contains(.simulator) && deviceOptions.keys.allSatisfy { key in item.deviceOptions.contains { $0.key == key } }
            }
            if owners.count == 1 { deviceProtocol = owners[0].name }
        }
        // The device half checks its own keys.
        guard !deviceOptions.isEmpty, let chosen = updateProtocol(in: registry) else { return }
        for key in deviceOptions.keys where !chosen.deviceOptions.contains(where: { $0.key == key }) {
            throw SimulatorAddressError(
                "sim:// key '\(key)' is for another protocol's device: \(chosen.name) takes "
                    + (chosen.deviceOptions.isEmpty ? "none" : chosen.deviceOptions.map(\.key).joined(separator: ", ")))
        }
        do { _ = try chosen.makeDevice(Simulation.configuration(self, for: chosen)) } catch {
            throw SimulatorAddressError("sim:// \(error.description)")
        }
    }

    private mutating func apply(key: String, value: String, registry: ProtocolRegistry) throws(SimulatorAddressError) {
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
        func milliseconds(upTo maximum: Double = 86_400_000) throws(SimulatorAddressError) -> Duration {
            let ms = try number()
            guard ms >= 0 else { throw SimulatorAddressError("sim:// key '\(key)' cannot be negative") }
            // Far below what would overflow a Duration: a day of simulated time is already absurd.
            guard ms <= maximum else {
                throw SimulatorAddressError("sim:// key '\(key)' is out of range: use 0…\(Int(maximum)) ms, got \(value)")
            }
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
        case "disconnect-time":
            let seconds = try number()
            guard (0...86_400).contains(seconds) else {
                throw SimulatorAddressError("sim:// key 'disconnect-time' is out of range: use 0…86400 s, got \(value)")
            }
            faults.disconnectAtTime = .microseconds(Int64((seconds * 1_000_000).rounded()))
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
        case "when-full":
            guard let handling = FullQueueHandling(rawValue: value) else {
                throw SimulatorAddressError("sim:// key 'when-full' is drop or hold, got '\(value)'")
            }
            whenQueueFull = handling
        case "processing": model.deviceProcessingPerPacket = try milliseconds()
        case "erase": model.flashEraseTimePerPage = try milliseconds()
        case "reboot-time": model.rebootTime = try milliseconds()
        case "slot":
            let size = try count()
            guard size > 0 else { throw SimulatorAddressError("sim:// key 'slot' must be at least 1 byte") }
            slotSize = size
        case "version": initialVersion = value
        case "security":
            guard let level = SecurityLevel(name: value) else {
                throw SimulatorAddressError("sim:// key 'security' is none, encrypted, authenticated or secure-connections, got '\(value)'")
            }
            deviceSecurity.required = level
        case "device-io":
            guard let capability = SimulatedDeviceSecurity.ioCapability(named: value) else {
                throw SimulatorAddressError("sim:// key 'device-io' is display, yesno, keyboard, keyboard-display or none, got '\(value)'")
            }
            deviceSecurity.ioCapability = capability
        case "device-passkey":
            guard value.count <= 6, let passkey = UInt32(value), passkey <= 999_999 else {
                throw SimulatorAddressError("sim:// key 'device-passkey' is six digits (000000…999999), got '\(value)'")
            }
            deviceSecurity.passkey = passkey
        case "ccc":
            guard value == "open" || value == "protected" else {
                throw SimulatorAddressError("sim:// key 'ccc' is open or protected, got '\(value)'")
            }
            deviceSecurity.protectsSubscription = value == "protected"
        case "legacy-pairing":
            guard value == "0" || value == "1" else {
                throw SimulatorAddressError("sim:// key 'legacy-pairing' is 0 or 1, got '\(value)'")
            }
            deviceSecurity.secureConnections = value == "0"
        case "protocol":
            let simulated = registry.protocols.filter { $0.identity.transports.contains(.simulator) }.map(\.name)
            guard simulated.contains(value) else {
                let choices = simulated.map { "protocol=\($0)" }
                let list = choices.count > 1 ? choices.dropLast().joined(separator: ", ") + " or " + choices.last! : choices.joined()
                throw SimulatorAddressError("sim:// protocol '\(value)' is not simulated: use \(list)")
            }
            deviceProtocol = value
        case "protocol-file":
            // The command line registered it before parsing; an address parsed on its own reads it here.
            if let described = registry.protocols.lazy.compactMap({ $0 as? DescribedProtocol }).first(where: { $0.description.source == value }) {
                deviceProtocol = described.name
            } else {
                do { describedProtocol = try DescribedProtocol(contentsOf: value) } catch {
                    throw SimulatorAddressError("sim:// protocol-file: \(error.description)")
                }
                deviceProtocol = describedProtocol?.name
            }
        default:
            guard registry.deviceOptions.contains(where: { $0.option.key == key }) else {
                throw SimulatorAddressError("unknown sim:// key '\(key)': use \(Self.keys(registry).map(\.key).joined(separator: ", "))")
            }
            deviceOptions[key] = value
        }
    }
}
