/// A GATT service that carries a protocol's packets: written to one
/// characteristic (Write Without Response), notified from another (or the
/// same one, as MCUmgr's SMP does).
///
/// Protocols declare theirs; the BLE connector looks them up in a device's
/// database and turns them into a ``GATTLink``, and `bleota serve` offers them
/// from its GATT server. Both directions carry whole protocol packets of at
/// most ATT MTU − 3 bytes.
public struct GATTPacketService: Sendable, Hashable {
    public var service: BluetoothUUID
    /// Host → device: written without response.
    public var write: BluetoothUUID
    /// Device → host: notified.
    public var notify: BluetoothUUID
    /// For messages: "MCUmgr SMP", "bleota OTA".
    public var name: String

    public init(service: BluetoothUUID, write: BluetoothUUID, notify: BluetoothUUID, name: String) {
        self.service = service
        self.write = write
        self.notify = notify
        self.name = name
    }
}
