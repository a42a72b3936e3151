import BleotaCodec
import BleotaLink
import BleotaSystem
import Foundation

/// The keys of the devices this machine paired with, kept by bleota so a
/// later connection encrypts without pairing again, after a reboot too.
///
/// One JSON file, `$XDG_STATE_HOME/bleota/bonds.json` (`~/.local/state/…`),
/// mode 0600 and written atomically (a temporary file renamed over it): it
/// holds Long Term Keys, which are secrets. Each bond is the identity
/// address a device gave when it paired, the adapter it paired through, its
/// LTKs and, when it has one, its IRK (which resolves the private addresses it
/// advertises from). bleota loads them into the kernel (Load Long Term Keys,
/// Load Identity Resolving Keys) before connecting, when bluetoothd does not
/// manage the adapter (bluetoothd keeps its own bonds and would be wiped).
public struct BondStore: Sendable {
    public let path: String

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        let base =
            environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.local/state")
        path = base + "/bleota/bonds.json"
    }

    public init(path: String) { self.path = path }

    /// One device's bond with one adapter.
    public struct Bond: Sendable, Hashable, Codable {
        /// The adapter's address (bonds belong to a controller).
        public var adapter: BluetoothAddress
        /// The device's identity address.
        public var identity: ManagementAddress
        public var longTermKeys: [LongTermKey]
        public var identityResolvingKey: IdentityResolvingKey?
        public var created: Date

        public init(
            adapter: BluetoothAddress, identity: ManagementAddress, longTermKeys: [LongTermKey] = [],
            identityResolvingKey: IdentityResolvingKey? = nil, created: Date = Date()
        ) {
            self.adapter = adapter
            self.identity = identity
            self.longTermKeys = longTermKeys
            self.identityResolvingKey = identityResolvingKey
            self.created = created
        }

        /// The security a link encrypted with this bond has.
        public var level: SecurityLevel { longTermKeys.map(\.kind.level).max() ?? .low }
        public var secureConnections: Bool { longTermKeys.contains { $0.kind.secureConnections } }
    }

    struct File: Codable {
        var version = 1
        var bonds: [Bond] = []
    }

    /// Why the store could not be read or written, with what to do.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public var description: String
    }

    /// Every bond (none when the file does not exist yet).
    public func load() throws(Failure) -> [Bond] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do { return try decoder.decode(File.self, from: data).bonds } catch {
            throw Failure(description: "\(path) is not a bond file bleota can read (\(error)): move it aside and pair again")
        }
    }

    /// The bonds made through `adapter`.
    public func bonds(adapter: BluetoothAddress) throws(Failure) -> [Bond] {
        try load().filter { $0.adapter == adapter }
    }

    /// Adds a key to `identity`'s bond with `adapter` (made if new); a key of the same role replaces the old one.
    public func add(_ key: LongTermKey, adapter: BluetoothAddress) throws(Failure) {
        try update(adapter: adapter, identity: key.peer) { bond in
            bond.longTermKeys.removeAll { $0.central == key.central && $0.kind.secureConnections == key.kind.secureConnections }
            if key.kind.secureConnections { bond.longTermKeys.removeAll { !$0.kind.secureConnections } } else { bond.longTermKeys.removeAll { $0.kind.secureConnections } }
            bond.longTermKeys.append(key)
        }
    }

    public func add(_ key: IdentityResolvingKey, adapter: BluetoothAddress) throws(Failure) {
        try update(adapter: adapter, identity: key.identity) { $0.identityResolvingKey = key }
    }

    /// Removes every bond with `address` (its identity); returns how many there were.
    @discardableResult
    public func remove(_ address: BluetoothAddress, adapter: BluetoothAddress? = nil) throws(Failure) -> Int {
        var file = File(bonds: try load())
        let before = file.bonds.count
        file.bonds.removeAll { $0.identity.address == address && (adapter == nil || $0.adapter == adapter) }
        let removed = before - file.bonds.count
        if removed > 0 { try save(file) }
        return removed
    }

    private func update(adapter: BluetoothAddress, identity: ManagementAddress, _ change: (inout Bond) -> Void) throws(Failure) {
        var file = File(bonds: try load())
        if let index = file.bonds.firstIndex(where: { $0.adapter == adapter && $0.identity.address == identity.address }) {
            change(&file.bonds[index])
        } else {
            var bond = Bond(adapter: adapter, identity: identity)
            change(&bond)
            file.bonds.append(bond)
        }
        try save(file)
    }

    private func save(_ file: File) throws(Failure) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        let directory = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try AtomicFile.write(Array(try encoder.encode(file)), to: path, permissions: 0o600)
        } catch let failure as AtomicFile.Failure {
            throw Failure(description: "cannot write \(path): \(String(cString: strerror(failure.code))); the bond was not kept")
        } catch {
            throw Failure(description: "cannot write \(path): \(error); the bond was not kept")
        }
    }
}
