import BleotaATT
import Foundation

/// The update protocols bleota knows, in order of preference, and the one
/// place that decides which of them a device and an image call for.
///
/// The built-in registry (`ProtocolRegistry.builtIn`, in BleotaProtocols)
/// holds bleota's own protocols; a vendor adds its own with
/// ``registering(_:)`` and runs bleota's commands with the result (see
/// `samples/vendor-protocol`). Order matters only when several protocols fit
/// equally well: the earlier one wins.
public struct ProtocolRegistry: Sendable {
    public private(set) var protocols: [any UpdateProtocol]

    public init(_ protocols: [any UpdateProtocol]) {
        self.protocols = []
        for item in protocols { self = registering(item) }
    }

    /// This registry with `item` added, or put in place of the protocol of the same name.
    public func registering(_ item: any UpdateProtocol) -> ProtocolRegistry {
        var copy = self
        if let index = copy.protocols.firstIndex(where: { $0.name == item.name }) {
            copy.protocols[index] = item
        } else {
            copy.protocols.append(item)
        }
        return copy
    }

    public var names: [String] { protocols.map(\.name) }

    public func named(_ name: String) -> (any UpdateProtocol)? { protocols.first { $0.name == name } }

    /// The protocol a simulated device speaks when its address names none.
    public var defaultProtocol: (any UpdateProtocol)? { protocols.first { $0.identity.transports.contains(.simulator) } }

    /// Every key a simulated device of any registered protocol accepts.
    public var deviceOptions: [(protocolName: String, option: DeviceOptionSpec)] {
        protocols.flatMap { item in item.deviceOptions.map { (item.name, $0) } }
    }

    /// The protocol a command names with `--protocol`, or without one the first that runs by
    /// default over one of `transports`: for commands that serve or queue rather than connect
    /// (`sim serve`, fleet campaigns), which have no device or image to decide by.
    public func named(_ name: String?, orDefaultOver transports: [TransportKind]) throws(ProtocolResolutionError) -> any UpdateProtocol {
        if let name {
            guard let chosen = named(name) else {
                throw unknownProtocol(name)
            }
            return chosen
        }
        guard let chosen = protocols.first(where: { item in transports.contains { item.identity.isDefault(over: $0) } }) else {
            throw ProtocolResolutionError(
                "no registered protocol runs over \(transports.map(\.rawValue).joined(separator: " or ")): name one with --protocol (\(names.joined(separator: ", ")))",
                usage: true)
        }
        return chosen
    }

    /// The refusal of a `--protocol` no registered protocol has: the names that would work, the
    /// nearest of them when it looks misspelt, and, where the working directory holds a
    /// description of that name (`protocols/telink-ota.yaml` in bleota's repository), how to load it.
    func unknownProtocol(_ name: String) -> ProtocolResolutionError {
        var message = "--protocol '\(name)' is not a protocol bleota knows"
        if let near = NameSuggestion.closest(to: name, among: names) {
            message += " (did you mean '\(near)'?)"
        }
        message += ": use one of \(names.joined(separator: ", "))"
        let description = "protocols/\(name).yaml"
        if FileManager.default.fileExists(atPath: description) {
            message += ", or load its description with --protocol-file \(description)"
        } else {
            message += ", or a protocol described in YAML with --protocol-file FILE"
        }
        return ProtocolResolutionError(message, usage: true)
    }

    /// Picks the protocol for one command, once: from `--protocol`, from what
    /// the address says, from the image, or from what the device offers —
    /// in that order of authority. Every refusal says what would work.
    public func resolve(_ request: ProtocolRequest) throws(ProtocolResolutionError) -> any UpdateProtocol {
        let names = self.names.joined(separator: ", ")
        if let explicit = request.explicit {
            guard let chosen = named(explicit) else {
                throw unknownProtocol(explicit)
            }
            // The address says what the device speaks (a simulated one is made to speak it): a --protocol
            // that says otherwise would talk past it.
            if let spoken = request.deviceProtocol, spoken != chosen.name {
                throw ProtocolResolutionError(
                    "--protocol \(explicit) disagrees with \(request.device), whose device speaks \(spoken): drop --protocol, or protocol=\(spoken) from the address",
                    usage: true)
            }
            try check(chosen, fits: request)
            try check(chosen, carries: request, instead: "leave out --protocol \(explicit)")
            return chosen
        }
        if let spoken = request.deviceProtocol {
            guard let chosen = named(spoken) else {
                throw ProtocolResolutionError("the device speaks '\(spoken)', which bleota does not know: use one of \(names)", usage: true)
            }
            try check(chosen, fits: request)
            try check(chosen, carries: request, instead: "remove protocol=\(spoken) from the address")
            return chosen
        }
        // The image decides wherever the address does not: a protocol whose own format it is
        // (its bootloader's), among every protocol that runs over this transport and, when known,
        // that the device offers — before the protocols a transport speaks by default.
        if let probe = request.image, let owner = imageOwner(probe, for: request) {
            return owner
        }
        var candidates = protocols.filter { $0.identity.isDefault(over: request.transport) }
        if let services = request.offeredServices {
            candidates = candidates.filter { $0.recognises(services: services) }
            guard !candidates.isEmpty else {
                let known = protocols.flatMap(\.identity.gattServices).map(\.name)
                throw ProtocolResolutionError(
                    "\(request.device) offers none of the update services bleota knows (\(known.joined(separator: ", "))): is it running OTA-capable firmware?",
                    usage: false)
            }
        }
        let able = candidates.filter { $0.capabilities.isSuperset(of: request.needs) }
        guard !able.isEmpty else {
            let spoken = candidates.map { $0.identity.displayName }.joined(separator: " or ")
            throw ProtocolResolutionError(
                "\(request.device) speaks \(spoken.isEmpty ? "no protocol bleota knows over \(request.transport.rawValue)" : spoken), which cannot \(request.needs.summary)",
                usage: true)
        }
        if let probe = request.image {
            let ranked = able.map { ($0, $0.imageAffinity(probe)) }.filter { $0.1 > .refuses }
            guard let best = ranked.max(by: { $0.1 < $1.1 }) else {
                let spoken = able.map { $0.identity.displayName }.joined(separator: " or ")
                throw ProtocolResolutionError(
                    "\(probe.path) is not an image that \(spoken) takes, and that is what bleota assumes \(request.device) speaks: name the device's protocol with --protocol (bleota protocols lists them)",
                    usage: true)
            }
            return best.0
        }
        return able[0]
    }

    /// The protocol whose own format `probe` is, among those that can serve `request`; nil when the
    /// image is plain bytes any of them could carry.
    public func imageOwner(_ probe: ImageProbe, for request: ProtocolRequest) -> (any UpdateProtocol)? {
        var able = protocols.filter { $0.identity.transports.contains(request.transport) && $0.capabilities.isSuperset(of: request.needs) }
        if let services = request.offeredServices { able = able.filter { $0.recognises(services: services) } }
        return able.first { $0.imageAffinity(probe) == .owns }
    }

    /// Refuses a protocol the user or the address named when the image is another protocol's own
    /// format and the named one cannot carry it: the message names both, and the way out.
    private func check(_ chosen: any UpdateProtocol, carries request: ProtocolRequest, instead: String) throws(ProtocolResolutionError) {
        guard let probe = request.image, chosen.imageAffinity(probe) == .refuses,
            let owner = protocols.first(where: { $0.name != chosen.name && $0.imageAffinity(probe) == .owns })
        else { return }
        throw ProtocolResolutionError(
            "\(probe.path) is made for \(owner.identity.displayName), but \(request.device) is to speak \(chosen.identity.displayName): "
                + "\(instead) to flash it with \(owner.name), or give an image made for \(chosen.name)",
            usage: true)
    }

    private func check(_ chosen: any UpdateProtocol, fits request: ProtocolRequest) throws(ProtocolResolutionError) {
        guard chosen.identity.transports.contains(request.transport) else {
            let fitting = protocols.filter { $0.identity.transports.contains(request.transport) }.map(\.name)
            throw ProtocolResolutionError(
                "\(chosen.identity.displayName) does not run over \(request.transport.rawValue) (\(request.device))"
                    + (fitting.isEmpty ? "" : ": use --protocol \(fitting.joined(separator: " or ")) (or leave it out)"),
                usage: true)
        }
        guard chosen.capabilities.isSuperset(of: request.needs) else {
            let able = protocols.filter { $0.capabilities.isSuperset(of: request.needs) && $0.identity.transports.contains(request.transport) }
            var message = "\(request.device) speaks \(chosen.identity.displayName), which cannot \(request.needs.subtracting(chosen.capabilities).summary)"
            if request.transport == .simulator, let other = able.first {
                message += ": add protocol=\(other.name) to the sim:// address for a device that can"
            }
            throw ProtocolResolutionError(message, usage: true)
        }
    }
}

/// What is known when a command resolves its protocol.
public struct ProtocolRequest: Sendable {
    /// `--protocol`, if given.
    public var explicit: String?
    /// How the device is reached.
    public var transport: TransportKind
    /// The device address as given, for messages.
    public var device: String
    /// The protocol the address itself names (a simulated device's `protocol=`).
    public var deviceProtocol: String?
    /// The image to flash, if any.
    public var image: ImageProbe?
    /// The GATT services the device offers, once discovered (BLE).
    public var offeredServices: [BluetoothUUID]?
    /// What the command needs the protocol to do.
    public var needs: ProtocolCapabilities

    public init(
        explicit: String? = nil, transport: TransportKind, device: String, deviceProtocol: String? = nil,
        image: ImageProbe? = nil, offeredServices: [BluetoothUUID]? = nil, needs: ProtocolCapabilities
    ) {
        self.explicit = explicit
        self.transport = transport
        self.device = device
        self.deviceProtocol = deviceProtocol
        self.image = image
        self.offeredServices = offeredServices
        self.needs = needs
    }
}

/// Why no protocol fits, in one line; `usage` when the command line asked for the impossible.
public struct ProtocolResolutionError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public var usage: Bool
    public init(_ description: String, usage: Bool) {
        self.description = description
        self.usage = usage
    }
}
