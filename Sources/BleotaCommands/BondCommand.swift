import ArgumentParser
import BleotaBlueZ
import BleotaLink
import Foundation

/// `bleota bond`: the bonds bleota keeps (without bluetoothd) so devices encrypt without pairing again.
struct BondCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bond",
        abstract: "List, remove or make (pair) the bonds bleota keeps with paired devices.",
        discussion: """
            When bluetoothd does not run, bleota pairs through the kernel's management interface and keeps \
            each bond (the device's identity address, its Long Term Keys and Identity Resolving Key) in \
            $XDG_STATE_HOME/bleota/bonds.json (~/.local/state/bleota/bonds.json, mode 0600), which it loads \
            into the kernel before connecting. Keys are never printed. With bluetoothd, bonds are its own: \
            use bluetoothctl.
            """,
        subcommands: [BondList.self, BondRemove.self, BondPair.self])
}

/// `bleota bond pair`: pairs before anything is written, through bluetoothd's `Device1.Pair`.
struct BondPair: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pair",
        abstract: "Pair with a device now, through bluetoothd, and keep the bond (bluetoothctl devices Paired lists it).",
        discussion: """
            bluetoothd connects, pairs and keeps the bond; bleota is its pairing agent and answers with \
            --passkey or --accept-pairing (or asks on a terminal). bluetoothd stays connected, and the \
            next bleota command shares its link. Without bluetoothd there is no need: bleota pairs when a \
            device demands it (flash --passkey N) and keeps the bond itself (bleota bond list).
            """)
    @OptionGroup var global: GlobalOptions
    @Option(name: .long, help: "The device: ble://AA:BB:CC:DD:EE:FF[?type=random&adapter=hci0].") var device: DeviceAddress
    @Option(
        name: .long, help: "How long bluetoothd may look for a device it does not know yet, in seconds or with a unit (0.1…600 s, e.g. 500ms; default 10).",
        transform: TimeArgument.parse)
    var discoverySeconds: TimeArgument?
    var discovery: Double { discoverySeconds?.seconds() ?? 10 }
    @OptionGroup var pairing: PairingOptions

    func validate() throws {
        if let discoverySeconds { _ = try discoverySeconds.checkedSeconds(option: "--discovery-seconds", range: 0.1...600) }
    }

    func run() async throws {
        guard case .ble(let target) = try device.kind() else {
            throw CommandFailure(
                .usage, "bond pair pairs a Bluetooth device: give --device ble://AA:BB:CC:DD:EE:FF (a \(device.text.prefix { $0 != ":" }):// device has no pairing)")
        }
        _ = try requireBluetooth(adapter: target.adapter)
        guard BluetoothDaemon.isRunning else {
            throw CommandFailure(
                .usage,
                "bond pair goes through bluetoothd, which does not run here: without it bleota pairs when a device demands it (flash --passkey N) and keeps the bond (bleota bond list)"
            )
        }
        guard let adapter = target.adapter ?? BluetoothAvailability.probe(adapter: nil).adapterName else {
            throw CommandFailure(.bluetoothUnavailable, BluetoothAvailability.noAdapter(nil).description)
        }
        let logger = global.makeLogger("bleota.bond")
        // bluetoothd asks the default agent: bleota's, with the answers these options give.
        let answerer = await PairingService.shared.answerer(adapter: adapter, policy: pairing.policy, logger: logger)
        if let unavailable = answerer.unavailable {
            await PairingService.shared.stopAll()
            throw CommandFailure(.pairingFailed, unavailable)
        }
        let outcome: BluetoothDaemonPairing.Outcome
        do {
            outcome = try await BluetoothDaemonPairing.pair(
                adapter: adapter, device: target.address, discovery: .milliseconds(Int64(discovery * 1000)), clock: SystemClock(), logger: logger)
        } catch {
            await PairingService.shared.stopAll()
            switch error.kind {
            case .notFound: throw CommandFailure(.linkLost, error.description)
            case .authentication:
                throw CommandFailure(
                    .pairingFailed, "pairing with \(target.address) failed (\(error.description)): check the passkey (--passkey) or confirm the number on the device")
            case .connection: throw CommandFailure(.linkLost, "bluetoothd could not pair with \(target.address): \(error.description)")
            case .daemon: throw CommandFailure(.failure, error.description)
            }
        }
        await PairingService.shared.stopAll()
        if global.json {
            struct Output: Codable {
                var device: String
                var adapter: String
                var through = "bluetoothd"
                var alreadyPaired: Bool
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Output(device: target.address.description, adapter: adapter, alreadyPaired: outcome.alreadyPaired)))
        } else if outcome.alreadyPaired {
            Terminal.standardOutput.writeLine("\(target.address) is paired already (bluetoothd keeps the bond; bluetoothctl remove \(target.address) forgets it)")
        } else {
            Terminal.standardOutput.writeLine("paired with \(target.address) through bluetoothd on \(adapter); it keeps the bond (bluetoothctl devices Paired lists it)")
        }
    }
}

struct BondList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the bonds: device, adapter, security, keys held (never their values).")
    @OptionGroup var global: GlobalOptions

    struct Entry: Codable {
        var device: String
        var addressType: String
        var adapter: String
        var security: SecurityLevel
        var secureConnections: Bool
        var longTermKeys: Int
        var identityResolvingKey: Bool
        var created: Date
    }

    func run() async throws {
        let store = BondStore()
        let bonds: [BondStore.Bond]
        do { bonds = try store.load() } catch { throw CommandFailure(.badInput, error.description) }
        let entries = bonds.map { bond in
            Entry(
                device: bond.identity.address.description, addressType: bond.identity.addressType?.rawValue ?? "bredr",
                adapter: bond.adapter.description, security: bond.level, secureConnections: bond.secureConnections,
                longTermKeys: bond.longTermKeys.count, identityResolvingKey: bond.identityResolvingKey != nil, created: bond.created)
        }
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(entries))
            return
        }
        guard !entries.isEmpty else {
            Terminal.standardOutput.writeLine("no bonds (\(store.path))")
            return
        }
        for entry in entries {
            Terminal.standardOutput.writeLine(
                "\(entry.device) (\(entry.addressType)) via \(entry.adapter): \(entry.security.name)"
                    + (entry.secureConnections ? ", LE Secure Connections" : ", LE legacy pairing")
                    + (entry.identityResolvingKey ? ", resolves its private addresses" : ""))
        }
    }
}

struct BondRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "remove", abstract: "Forget a device's bond: here and, when bleota manages the adapter, in the kernel.")
    @OptionGroup var global: GlobalOptions
    @Option(name: .long, help: "Only the bond made through this adapter (hci0, …).") var adapter: String?
    @Argument(help: "The device's identity address: AA:BB:CC:DD:EE:FF, or ble://AA:BB:CC:DD:EE:FF as other commands' --device takes it.")
    var address: String

    /// The address without a `ble://` scheme and its query, so the form every --device takes works here too.
    var identity: BluetoothAddress? {
        guard address.hasPrefix("ble://") else { return BluetoothAddress(address) }
        return BluetoothAddress(String(address.dropFirst("ble://".count).prefix { $0 != "?" }))
    }

    func validate() throws {
        guard identity != nil else {
            throw ValidationError("'\(address)' is not a Bluetooth address: write six hex bytes like C0:FF:EE:00:00:01")
        }
    }

    func run() async throws {
        let device = identity!
        let store = BondStore()
        let adapterAddress = adapter.flatMap { BluetoothAvailability.address(of: $0) }
        let bonds: [BondStore.Bond]
        do { bonds = try store.load().filter { $0.identity.address == device && (adapterAddress == nil || $0.adapter == adapterAddress) } } catch {
            throw CommandFailure(.badInput, error.description)
        }
        guard !bonds.isEmpty else { throw CommandFailure(.badInput, "no bond with \(device) in \(store.path): `bleota bond list` shows the bonds") }
        do { try store.remove(device, adapter: adapterAddress) } catch { throw CommandFailure(.failure, error.description) }
        // The kernel keeps the keys until told: forget them there too, where bleota manages the adapter
        // (Unpair Device only: the adapter's settings are left as they are).
        var note: String?
        if case .available(let name) = BluetoothAvailability.probe(adapter: adapter), !BluetoothDaemon.isRunning,
            let index = UInt16(name.dropFirst(3))
        {
            do {
                let channel = try ManagementChannel.open()
                for bond in bonds { _ = try? await channel.send(.unpairDevice(bond.identity, disconnect: true), index: index) }
                channel.close()
            } catch {
                note = error.description
            }
        }
        if global.json {
            struct Output: Codable {
                var removed: Int
                var device: String
                var note: String?
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Output(removed: bonds.count, device: device.description, note: note)))
        } else {
            Terminal.standardOutput.writeLine("removed \(bonds.count) bond\(bonds.count == 1 ? "" : "s") with \(device); remove it on the device too before pairing again")
            if let note { Terminal.standardError.writeLine("note: the kernel may still hold the keys until the adapter restarts: \(note)") }
        }
    }
}
