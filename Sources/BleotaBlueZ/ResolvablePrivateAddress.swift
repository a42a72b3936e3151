import Crypto
import _CryptoExtras

/// Resolvable private addresses (Core v5.4, Vol 6, Part B, §1.3.2.2): a device
/// that keeps its privacy advertises from an address that changes (every 15
/// minutes, and often across a reset into its bootloader) but that whoever
/// holds its Identity Resolving Key can tell is its own.
///
/// The address is `prand || hash`, most significant first: 24 random bits whose
/// top two are `01`, then `ah(IRK, prand)`, the low 24 bits of AES-128 of
/// `prand` padded with zeros (Vol 3, Part H, §2.2.2). Keys and addresses are
/// given as written (most significant byte first); the IRK as the management
/// interface and SMP carry it, least significant byte first.
public enum ResolvablePrivateAddress {
    /// Whether `address` is a resolvable private address at all (a random address whose top bits are `01`).
    public static func isResolvable(_ address: BluetoothAddress) -> Bool {
        address.bytes.count == 6 && address.bytes[0] >> 6 == 0b01
    }

    /// `ah(k, r)`: the 24-bit hash of `prand` (3 bytes, most significant first) under `irk`
    /// (16 bytes, least significant first), most significant byte first.
    public static func hash(irk: [UInt8], prand: [UInt8]) -> [UInt8]? {
        guard irk.count == 16, prand.count == 3 else { return nil }
        // The spec's e() takes its key and data most significant octet first.
        var block = [UInt8](repeating: 0, count: 13) + prand
        do { try AES.permute(&block, key: SymmetricKey(data: Array(irk.reversed()))) } catch { return nil }
        return Array(block.suffix(3))
    }

    /// Whether `address` was made with `irk`.
    public static func resolves(_ address: BluetoothAddress, irk: [UInt8]) -> Bool {
        guard isResolvable(address), let hash = hash(irk: irk, prand: Array(address.bytes.prefix(3))) else { return false }
        return hash == Array(address.bytes.suffix(3))
    }

    /// A new address for `irk` from `prand`'s 22 random bits (the top two are set to `01`).
    public static func make(irk: [UInt8], prand: [UInt8]) -> BluetoothAddress? {
        guard prand.count == 3 else { return nil }
        var random = prand
        random[0] = random[0] & 0x3F | 0x40
        guard let hash = hash(irk: irk, prand: random) else { return nil }
        return BluetoothAddress(littleEndian: (random + hash).reversed())
    }

    /// The identity among `keys` whose IRK made `address`, if any.
    public static func identity(of address: BluetoothAddress, among keys: [IdentityResolvingKey]) -> ManagementAddress? {
        keys.first { resolves(address, irk: $0.value) }?.identity
    }
}
