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

    /// For a protocol that spans several characteristics (Nordic DFU's control
    /// point, packet and buttonless ones): each as a channel of a
    /// ``/BleotaLink/ChannelLink``. Empty for the classic pair above.
    public var channels: [GATTChannel]
    /// A channel carried on an LE credit-based channel instead of a characteristic, if the protocol has one.
    public var creditChannel: CreditChannelRoute?

    public init(
        service: BluetoothUUID, write: BluetoothUUID, notify: BluetoothUUID, name: String, channels: [GATTChannel] = [],
        creditChannel: CreditChannelRoute? = nil
    ) {
        self.service = service
        self.write = write
        self.notify = notify
        self.name = name
        self.channels = channels
        self.creditChannel = creditChannel
    }
}

/// A channel of a multi-characteristic protocol that travels on an LE
/// credit-based connection-oriented channel (Core v5.4, Vol 3, Part A, §10.1)
/// rather than a characteristic: SUOTA 1.2+'s image data. The device publishes
/// the PSM in the readable channel `psmChannel` (u16 LE) and listens on it once
/// the protocol asked it to (SUOTA's MEM_DEV); each packet on `channel` is one
/// SDU, and the credits are its flow control — nothing is dropped for want of
/// a buffer.
public struct CreditChannelRoute: Sendable, Hashable {
    public var channel: UInt8
    public var psmChannel: UInt8
    public init(channel: UInt8, psmChannel: UInt8) {
        self.channel = channel
        self.psmChannel = psmChannel
    }
}

/// One characteristic of a multi-characteristic protocol, as a numbered
/// channel: how the host writes it (with response, without, or not at all —
/// a read-only characteristic is read instead), and
/// whether the device notifies or indicates on it.
public struct GATTChannel: Sendable, Hashable {
    public enum Write: Sendable, Hashable {
        /// ATT Write Request: the device confirms each write (control points).
        case request
        /// ATT Write Request whose answer the device half decides and the host
        /// reads: taken, or refused with an application error code (Silicon
        /// Labs' OTA Control). Each write comes back as a
        /// ``/BleotaLink/ChannelMessage/writeResult(channel:code:)``.
        case answeredRequest
        /// ATT Write Command: no confirmation (data streams).
        case command
        /// Not written; read instead.
        case none
    }

    public enum Update: Sendable, Hashable {
        case none, notify, indicate
    }

    /// The number of this channel's packets (below ``/BleotaLink/ChannelFrame/firstReservedChannel``).
    public var number: UInt8
    /// The service it belongs to (a protocol's channels may span services, as Nordic's SDK 12 buttonless one does).
    public var service: BluetoothUUID
    public var characteristic: BluetoothUUID
    public var write: Write
    public var update: Update
    /// Readable: a ``/BleotaLink/ChannelMessage/read(channel:)`` reads it, and the value comes back as a packet on it.
    public var readable: Bool

    public init(number: UInt8, service: BluetoothUUID, characteristic: BluetoothUUID, write: Write, update: Update, readable: Bool = false) {
        self.number = number
        self.service = service
        self.characteristic = characteristic
        self.write = write
        self.update = update
        self.readable = readable
    }
}
