import Foundation
import Testing

@testable import BleotaBlueZ

/// Resolving private addresses, checked against addresses Google's Bumble made
/// (Fixtures/bumble-0.0.236-rpa.json, written by scripts/rpa-vectors.py).
@Suite struct ResolvablePrivateAddressTests {
    struct Vectors: Decodable {
        struct Case: Decodable {
            var irk: String
            var addresses: [String]
            var prand: String
            var hash: String
        }
        var tool: String
        var cases: [Case]
    }

    static func vectors() throws -> Vectors {
        let url = try #require(Bundle.module.url(forResource: "Fixtures/bumble-0.0.236-rpa", withExtension: "json"))
        return try JSONDecoder().decode(Vectors.self, from: Data(contentsOf: url))
    }

    @Test func bumblesAddressesResolveWithTheirKeyAndNoOther() throws {
        let vectors = try Self.vectors()
        #expect(vectors.cases.count == 8)
        for (index, entry) in vectors.cases.enumerated() {
            let irk = try #require([UInt8](hex: entry.irk))
            let hash = ResolvablePrivateAddress.hash(irk: irk, prand: try #require([UInt8](hex: entry.prand)))
            #expect(hash == [UInt8](hex: entry.hash), "case \(index)")
            for text in entry.addresses {
                let address = try #require(BluetoothAddress(text))
                #expect(ResolvablePrivateAddress.isResolvable(address))
                #expect(ResolvablePrivateAddress.resolves(address, irk: irk), "\(text) with case \(index)'s key")
                let other = try #require([UInt8](hex: vectors.cases[(index + 1) % vectors.cases.count].irk))
                #expect(!ResolvablePrivateAddress.resolves(address, irk: other), "\(text) with another key")
            }
        }
    }

    @Test func addressesItMakesResolveAndAreNamedAmongBonds() throws {
        let vectors = try Self.vectors()
        let irk = try #require([UInt8](hex: vectors.cases[0].irk))
        let made = try #require(ResolvablePrivateAddress.make(irk: irk, prand: [0xFF, 0x12, 0x34]))
        #expect(made.bytes[0] >> 6 == 0b01 && ResolvablePrivateAddress.resolves(made, irk: irk))
        let identity = ManagementAddress(BluetoothAddress("C0:98:E5:00:00:01")!, kind: .leRandom)
        let keys = [
            IdentityResolvingKey(
                identity: ManagementAddress(BluetoothAddress("00:AA:01:01:00:01")!, kind: .lePublic),
                value: try #require([UInt8](hex: vectors.cases[1].irk))),
            IdentityResolvingKey(identity: identity, value: irk),
        ]
        #expect(ResolvablePrivateAddress.identity(of: made, among: keys) == identity)
        // A public or static address is not resolvable, whatever its bits say after the first two.
        #expect(!ResolvablePrivateAddress.isResolvable(BluetoothAddress("C0:98:E5:00:00:01")!))
        #expect(ResolvablePrivateAddress.identity(of: BluetoothAddress("00:AA:01:01:00:01")!, among: keys) == nil)
    }

    /// A device bonded with its IRK is reached by its identity, with the identity's type, whatever
    /// private address it was named by; the rest of the address (adapter, PSM) is kept.
    @Test func aBondedDeviceIsAddressedByItsIdentity() throws {
        let named = try BLEDeviceAddress.parse("ble://7F:4E:DF:49:03:C6?type=random&adapter=hci2&psm=0x80").get()
        let random = BLEConnector.identity(ManagementAddress(BluetoothAddress("C0:98:E5:00:00:01")!, kind: .leRandom), of: named)
        #expect(random.address.description == "C0:98:E5:00:00:01")
        #expect(random.type == .random)
        #expect(random.adapter == "hci2")
        #expect(random.psm == 0x80)
        let publicIdentity = BLEConnector.identity(ManagementAddress(BluetoothAddress("00:AA:01:01:00:01")!, kind: .lePublic), of: named)
        #expect(publicIdentity.type == .public)
    }
}
