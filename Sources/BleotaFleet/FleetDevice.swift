import BleotaEngine
import BleotaLink
import Foundation

/// One device of a fleet: its address as `flash --device` takes it, and the
/// options a device list gives it (its adapter, its protocol, protocol options).
public struct FleetDevice: Sendable, Hashable, Codable {
    /// `ble://AA:BB:…`, `sim://…`, `udp://…`: what `bleota flash --device` takes.
    public var address: String
    /// The adapter to reach it through (hci1), when the list fixes one; otherwise the runner picks.
    public var adapter: String?
    /// `--protocol` for this device alone.
    public var protocolName: String?
    /// `--protocol-option` keys for this device alone, as the list writes them: parsed where the
    /// device's protocol is known (the fleet's planner).
    public var protocolOptions: ProtocolOptionText
    /// A label for tables and reports (the address when none is given).
    public var label: String
    /// How to answer the device when it demands pairing: its passkey, or that its bond must exist
    /// already; nil: Just Works only, and a device that wants more fails alone (exit 13's reason).
    public var pairing: DevicePairing?
    /// Where the device list gives it, for messages about it; not part of what the device is
    /// (equality and hashing leave it out).
    public var listedAt: ListPosition?

    /// A line of a text or CSV list, or an entry of a JSON array (both counted from 1).
    public enum ListPosition: Sendable, Hashable, Codable {
        case line(Int)
        case entry(Int)
    }

    public static func == (lhs: FleetDevice, rhs: FleetDevice) -> Bool {
        lhs.address == rhs.address && lhs.adapter == rhs.adapter && lhs.protocolName == rhs.protocolName
            && lhs.protocolOptions == rhs.protocolOptions && lhs.label == rhs.label && lhs.pairing == rhs.pairing
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(address)
        hasher.combine(adapter)
        hasher.combine(protocolName)
        hasher.combine(protocolOptions)
        hasher.combine(label)
        hasher.combine(pairing)
    }

    public init(
        address: String, adapter: String? = nil, protocolName: String? = nil, protocolOptions: ProtocolOptionText = [:], label: String? = nil,
        pairing: DevicePairing? = nil
    ) {
        self.address = address
        self.pairing = pairing
        self.adapter = adapter
        self.protocolName = protocolName
        self.protocolOptions = protocolOptions
        self.label = label ?? address
    }
}

/// What a device of a list demands to pair, and how to answer it.
public enum DevicePairing: Sendable, Hashable, Codable {
    /// Passkey entry with this passkey (the one the device shows, or its fixed one).
    case passkey(UInt32)
    /// The host must hold the device's bond already (`bleota bond pair` beforehand): it is
    /// never paired anew, so a device that lost its bond, or an impostor, fails instead.
    case bonded

    /// As a database keeps it: "passkey:123456" or "bonded".
    public var text: String {
        switch self {
        case .passkey(let passkey): "passkey:\(passkey)"
        case .bonded: "bonded"
        }
    }

    public init?(text: String) {
        if text == "bonded" {
            self = .bonded
        } else if text.hasPrefix("passkey:"), let passkey = PairingPolicy.passkey(parsing: String(text.dropFirst("passkey:".count))) {
            self = .passkey(passkey)
        } else {
            return nil
        }
    }

    /// A list's `passkey` and `bonded` fields as one answer; a problem as the sentence to print.
    static func parse(passkey: String?, bonded: String?) -> Result<DevicePairing?, PairingFieldProblem> {
        let isBonded: Bool
        switch bonded?.lowercased() {
        case nil, "", "no", "false", "0": isBonded = false
        case "yes", "true", "1": isBonded = true
        case let other?: return .failure(PairingFieldProblem("'bonded' is '\(other)': write yes or no"))
        }
        guard let passkey, !passkey.isEmpty else { return .success(isBonded ? .bonded : nil) }
        guard !isBonded else {
            return .failure(PairingFieldProblem("gives both a passkey and 'bonded': a bonded device is not paired again, so give one of them"))
        }
        guard let value = PairingPolicy.passkey(parsing: passkey) else {
            return .failure(PairingFieldProblem("passkey '\(passkey)' is not a passkey: give the six digits the device shows, e.g. 123456"))
        }
        return .success(.passkey(value))
    }
}

/// Why a row's pairing fields do not parse.
struct PairingFieldProblem: Error {
    var text: String
    init(_ text: String) { self.text = text }
}

/// A device list that does not parse, in one line: the file, the line, what is wrong and what to write.
public struct FleetListError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int?
    public var problem: String
    public init(file: String, line: Int?, _ problem: String) {
        self.file = file
        self.line = line
        self.problem = problem
    }
    public var description: String { "\(file)\(line.map { ":\($0)" } ?? ""): \(problem)" }

    /// `problem` about the device at `position` of `file`: `file:3: …` or `file: entry 2: …`.
    public init(file: String, at position: FleetDevice.ListPosition?, _ problem: String) {
        switch position {
        case .line(let line)?: self.init(file: file, line: line, problem)
        case .entry(let entry)?: self.init(file: file, line: nil, "entry \(entry): \(problem)")
        case nil: self.init(file: file, line: nil, problem)
        }
    }
}

/// Reads the devices of a fleet from a file: addresses one a line (`#` starts a
/// comment), CSV with a header (`device` and optional `adapter`, `protocol`,
/// `label`, `passkey`, `bonded` and `option:KEY` columns), or JSON (an array of
/// addresses, or of objects with the same keys; `options` an object).
public enum FleetDeviceList {
    public static func parse(_ text: String, file: String) throws(FleetListError) -> [FleetDevice] {
        let devices: [FleetDevice]
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("[") {
            devices = try parseJSON(trimmed, file: file)
        } else if let first = trimmed.split(separator: "\n", omittingEmptySubsequences: true).first,
            first.lowercased().split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }).contains("device")
        {
            devices = try parseCSV(trimmed, file: file)
        } else {
            devices = try parseLines(trimmed, file: file)
        }
        guard !devices.isEmpty else { throw FleetListError(file: file, line: nil, "lists no device: write one address a line, e.g. ble://AA:BB:CC:DD:EE:FF") }
        var seen: [String: Int] = [:]
        for (index, device) in devices.enumerated() {
            if let earlier = seen[device.address] {
                throw FleetListError(file: file, line: nil, "\(device.address) is listed twice (entries \(earlier + 1) and \(index + 1)): list each device once")
            }
            seen[device.address] = index
        }
        return devices
    }

    static func parseLines(_ text: String, file: String) throws(FleetListError) -> [FleetDevice] {
        var devices: [FleetDevice] = []
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            let address = line.trimmingCharacters(in: .whitespaces)
            guard !address.isEmpty else { continue }
            guard !address.contains(" "), !address.contains(",") else {
                throw FleetListError(file: file, line: number + 1, "'\(address)' is not one address: write one a line, or a CSV with a header line naming a 'device' column")
            }
            var device = FleetDevice(address: address)
            device.listedAt = .line(number + 1)
            devices.append(device)
        }
        return devices
    }

    static func parseCSV(_ text: String, file: String) throws(FleetListError) -> [FleetDevice] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: "\r")) }
        let header = lines[0].split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        for column in header where !["device", "adapter", "protocol", "label", "passkey", "bonded"].contains(column) && !column.hasPrefix("option:") {
            throw FleetListError(file: file, line: 1, "unknown column '\(column)': use device, adapter, protocol, label, passkey, bonded or option:KEY")
        }
        var devices: [FleetDevice] = []
        for (index, line) in lines.enumerated().dropFirst() where !line.trimmingCharacters(in: .whitespaces).isEmpty {
            let fields = line.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard fields.count == header.count else {
                throw FleetListError(file: file, line: index + 1, "\(fields.count) fields where the header names \(header.count): quote nothing, separate with commas")
            }
            var device = FleetDevice(address: "")
            var label: String?
            var passkey: String?, bonded: String?
            for (column, value) in zip(header, fields) where !value.isEmpty {
                switch column {
                case "device": device.address = value
                case "adapter": device.adapter = value
                case "protocol": device.protocolName = value
                case "label": label = value
                case "passkey": passkey = value
                case "bonded": bonded = value
                default: device.protocolOptions[String(column.dropFirst("option:".count))] = value
                }
            }
            guard !device.address.isEmpty else { throw FleetListError(file: file, line: index + 1, "no device address in the 'device' column") }
            switch DevicePairing.parse(passkey: passkey, bonded: bonded) {
            case .success(let pairing): device.pairing = pairing
            case .failure(let problem): throw FleetListError(file: file, line: index + 1, "\(device.address) \(problem.text)")
            }
            device.label = label ?? device.address
            device.listedAt = .line(index + 1)
            devices.append(device)
        }
        return devices
    }

    static func parseJSON(_ text: String, file: String) throws(FleetListError) -> [FleetDevice] {
        let value: Any
        do { value = try JSONSerialization.jsonObject(with: Data(text.utf8)) } catch {
            throw FleetListError(file: file, line: nil, "is not JSON (\(error.localizedDescription)): write an array of addresses or of objects with a 'device' key")
        }
        guard let array = value as? [Any] else { throw FleetListError(file: file, line: nil, "is not a JSON array: write [\"ble://…\", …]") }
        var devices: [FleetDevice] = []
        for (index, entry) in array.enumerated() {
            if let address = entry as? String {
                var device = FleetDevice(address: address)
                device.listedAt = .entry(index + 1)
                devices.append(device)
                continue
            }
            guard let object = entry as? [String: Any], let address = object["device"] as? String else {
                throw FleetListError(file: file, line: nil, "entry \(index + 1) has no 'device' string: write {\"device\": \"ble://…\"}")
            }
            var options = ProtocolOptionText()
            if let given = object["options"] {
                guard let table = given as? [String: Any] else {
                    throw FleetListError(file: file, line: nil, "entry \(index + 1): 'options' is not an object of strings")
                }
                for (key, value) in table { options[key] = "\(value)" }
            }
            var device = FleetDevice(
                address: address, adapter: object["adapter"] as? String, protocolName: object["protocol"] as? String,
                protocolOptions: options, label: object["label"] as? String)
            // A passkey may be written as a number or a string ("012345" keeps its zero).
            let passkey = (object["passkey"] as? String) ?? (object["passkey"] as? Int).map { String($0) }
            if object["passkey"] != nil, passkey == nil {
                throw FleetListError(file: file, line: nil, "entry \(index + 1): 'passkey' is not six digits: write \"passkey\": \"123456\"")
            }
            let bonded: String?
            switch object["bonded"] {
            case nil: bonded = nil
            case let flag as Bool: bonded = flag ? "yes" : "no"
            default: throw FleetListError(file: file, line: nil, "entry \(index + 1): 'bonded' is not true or false")
            }
            switch DevicePairing.parse(passkey: passkey, bonded: bonded) {
            case .success(let pairing): device.pairing = pairing
            case .failure(let problem): throw FleetListError(file: file, line: nil, "entry \(index + 1): \(address) \(problem.text)")
            }
            device.listedAt = .entry(index + 1)
            devices.append(device)
        }
        return devices
    }
}

extension FleetDevice {
    /// The answers its row gives when it demands pairing: its passkey; for a bonded device,
    /// no pairing anew; otherwise Just Works only.
    public var pairingPolicy: PairingPolicy {
        switch pairing {
        case .passkey(let passkey)?: PairingPolicy(passkey: passkey)
        case .bonded?: PairingPolicy(pairsAnew: false)
        case nil: .justWorks
        }
    }
}
