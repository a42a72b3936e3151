import BleotaATT
import BleotaCodec

/// One advertising report: who, how loud, and what it said.
///
/// The payload is a list of AD structures — length, type, data — defined in
/// the Core Specification Supplement, Part A, §1. Parsing never traps: a
/// structure whose length runs past the end stops the parse, keeping what came
/// before (real devices do send such packets).
public struct Advertisement: Sendable, Hashable, Codable {
    public var address: String
    public var addressType: String
    public var rssi: Int?
    public var flags: UInt8?
    public var localName: String?
    public var serviceUUIDs: [String] = []
    public var txPower: Int?
    public var manufacturer: Manufacturer?
    public var iBeacon: IBeacon?
    /// The firmware version the device advertises (``AdvertisedVersion``), as "1.2.3".
    public var version: String?
    /// AD types seen that bleota does not decode, for completeness.
    public var otherTypes: [UInt8] = []
    /// The identity address a resolvable private address stands for, when an IRK of bleota's bonds resolves it.
    public var identity: String?
    public var identityType: String?

    public struct Manufacturer: Sendable, Hashable, Codable {
        public var companyID: UInt16
        public var data: String  // hex
    }

    /// Apple's iBeacon layout inside manufacturer data (company 0x004C, type 0x02, length 0x15).
    public struct IBeacon: Sendable, Hashable, Codable {
        public var uuid: String
        public var major: UInt16
        public var minor: UInt16
        public var measuredPower: Int
    }

    public init(address: String, addressType: String, rssi: Int?, data: [UInt8]) {
        self.address = address
        self.addressType = addressType
        self.rssi = rssi
        merge(data)
    }

    /// Adds the AD structures of `data` (an advertisement or a scan response).
    public mutating func merge(_ data: [UInt8]) {
        var index = 0
        while index < data.count {
            let length = Int(data[index])
            if length == 0 { break }  // early termination (Supplement A §1: the rest is padding)
            guard index + 1 + length <= data.count else { break }
            let type = data[index + 1]
            let value = Array(data[(index + 2)..<(index + 1 + length)])
            decode(type: type, value: value)
            index += 1 + length
        }
    }

    private mutating func decode(type: UInt8, value: [UInt8]) {
        switch type {
        case 0x01:
            flags = value.first
        case 0x02, 0x03:
            for offset in stride(from: 0, to: value.count - 1, by: 2) {
                appendUUID(BluetoothUUID.bit16(UInt16(value[offset]) | UInt16(value[offset + 1]) << 8))
            }
        case 0x06, 0x07:
            for offset in stride(from: 0, through: value.count - 16, by: 16) where value.count >= 16 {
                appendUUID(BluetoothUUID(bytes128: Array(value[offset..<offset + 16].reversed())))
            }
        case 0x08, 0x09:
            let name = String(decoding: value, as: UTF8.self)
            if type == 0x09 || localName == nil { localName = name }
        case 0x0A:
            txPower = value.first.map { Int(Int8(bitPattern: $0)) }
        case 0xFF:
            guard value.count >= 2 else {
                otherTypes.append(type)
                return
            }
            let company = UInt16(value[0]) | UInt16(value[1]) << 8
            let payload = Array(value[2...])
            manufacturer = Manufacturer(companyID: company, data: payload.hexString)
            if let advertised = AdvertisedVersion.decode(payload) { version = advertised.description }
            if company == 0x004C, payload.count == 23, payload[0] == 0x02, payload[1] == 0x15 {
                // The proximity UUID is sent big-endian; always show all 128 bits.
                iBeacon = IBeacon(
                    uuid: BluetoothUUID.bit128(Array(payload[2..<18])).description,
                    major: UInt16(payload[18]) << 8 | UInt16(payload[19]),
                    minor: UInt16(payload[20]) << 8 | UInt16(payload[21]),
                    measuredPower: Int(Int8(bitPattern: payload[22])))
            }
        default:
            if !otherTypes.contains(type) { otherTypes.append(type) }
        }
    }

    private mutating func appendUUID(_ uuid: BluetoothUUID) {
        let text = uuid.description
        if !serviceUUIDs.contains(text) { serviceUUIDs.append(text) }
    }
}

/// Criteria for `bleota scan`.
public struct ScanFilter: Sendable {
    public var name: String?
    public var address: String?
    public var service: BluetoothUUID?

    public init(name: String? = nil, address: String? = nil, service: BluetoothUUID? = nil) {
        self.name = name
        self.address = address
        self.service = service
    }

    public func matches(_ advertisement: Advertisement) -> Bool {
        if let name, !(advertisement.localName?.localizedCaseInsensitiveContains(name) ?? false) { return false }
        // A device is named by its identity: a private address it stands for matches too.
        if let address, advertisement.address.uppercased() != address.uppercased(),
            advertisement.identity?.uppercased() != address.uppercased()
        {
            return false
        }
        if let service, !advertisement.serviceUUIDs.contains(service.description) { return false }
        return true
    }
}

/// Which devices a scan-based fleet updates, as a rule with no radio in it:
/// those the filter matches, heard at least `minimumRSSI` strongly, and — with
/// `olderThan` — advertising a version older than it, or none at all (a device
/// that does not say is asked once connected, as any device is).
public struct ScanSelection: Sendable {
    public var filter: ScanFilter
    public var minimumRSSI: Int?
    public var olderThan: MCUbootImage.Version?

    public init(filter: ScanFilter, minimumRSSI: Int? = nil, olderThan: MCUbootImage.Version? = nil) {
        self.filter = filter
        self.minimumRSSI = minimumRSSI
        self.olderThan = olderThan
    }

    /// The devices to update, strongest first, and those left out because they
    /// advertise `olderThan` or newer.
    public func choose(_ seen: [Advertisement]) -> (chosen: [Advertisement], current: [Advertisement]) {
        let matching = seen.filter { advertisement in
            filter.matches(advertisement) && (minimumRSSI.map { floor in (advertisement.rssi ?? .min) >= floor } ?? true)
        }
        .sorted { ($0.rssi ?? .min) > ($1.rssi ?? .min) }
        guard let olderThan else { return (matching, []) }
        func isCurrent(_ advertisement: Advertisement) -> Bool {
            advertisement.version.map { MCUbootImage.Version(parsing: $0) >= olderThan } ?? false
        }
        return (matching.filter { !isCurrent($0) }, matching.filter(isCurrent))
    }
}

/// Parses an HCI LE Advertising Report event (Core v5.4, Vol 4, Part E,
/// §7.7.65.2): the bytes after the event header.
public func parseAdvertisingReports(_ parameters: [UInt8]) -> [Advertisement] {
    var reader = ByteReader(parameters)
    guard let subevent = try? reader.readUInt8("subevent"), subevent == 0x02,
        let count = try? reader.readUInt8("reports")
    else { return [] }
    var reports: [Advertisement] = []
    for _ in 0..<count {
        guard (try? reader.readUInt8("event type")) != nil,
            let addressType = try? reader.readUInt8("address type"),
            let address = try? reader.readBytes(6, "address"),
            let length = try? reader.readUInt8("length"),
            let data = try? reader.readBytes(Int(length), "data"),
            let rssi = try? reader.readUInt8("rssi")
        else { break }
        let text = BluetoothAddress(littleEndian: address).description
        let rssiValue = Int(Int8(bitPattern: rssi))
        reports.append(
            Advertisement(
                address: text, addressType: addressType == 1 ? "random" : "public",
                rssi: rssiValue == 127 ? nil : rssiValue, data: data))
    }
    return reports
}
