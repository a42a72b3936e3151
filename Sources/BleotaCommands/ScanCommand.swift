import ArgumentParser
import BleotaATT
import BleotaBlueZ
import Foundation

/// `bleota scan`: what is advertising nearby.
struct ScanCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scan",
        abstract: "Scan for advertising LE devices: address, RSSI, name, service UUIDs, TX power, manufacturer data (iBeacon and advertised firmware versions decoded)."
    )

    @OptionGroup var global: GlobalOptions
    @Option(name: .long, help: "The adapter to scan with (default: the first).") var adapter: String?
    @Option(name: .customLong("duration"), help: "How long to scan, in seconds or with a unit (500ms; at most 600 s, default 5 s).", transform: TimeArgument.parse) var scanTime =
        TimeArgument(seconds: 5)
    var duration: Double { scanTime.seconds() }
    @Option(name: .long, help: "Only devices whose name contains this.") var name: String?
    @Option(name: .long, help: "Only this address.") var address: String?
    @Option(name: .long, help: "Only devices advertising this service UUID (16- or 128-bit).") var service: String?
    @Flag(name: .long, help: "Passive scan: do not ask for scan responses.") var passive = false

    func validate() throws {
        guard scanTime.seconds() > 0, scanTime.seconds() <= 600 else {
            throw ValidationError("--duration \(scanTime) is out of range: use more than 0 and at most 600 s (or write a unit: ms, us)")
        }
        if let service, BluetoothUUID(service) == nil {
            throw ValidationError("--service '\(service)' is not a UUID: use 4 hex digits (180D) or a full 128-bit UUID")
        }
    }

    func run() async throws {
        _ = try requireBluetooth(adapter: adapter)
        let filter = ScanFilter(name: name, address: address, service: service.flatMap(BluetoothUUID.init))
        let adapter = self.adapter, duration = self.duration, active = !passive
        let found: [Advertisement]
        do {
            found = try await Scanner.scan(adapter: adapter, duration: .milliseconds(Int64(duration * 1000)), active: active, filter: filter)
        } catch {
            throw CommandFailure(.bluetoothUnavailable, "\(error)")
        }
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(found))
            return
        }
        if found.isEmpty {
            Terminal.standardOutput.writeLine("no devices found in \(duration) s")
            return
        }
        for device in found {
            var line = "\(device.address) (\(device.addressType))"
            if let identity = device.identity {
                line +=
                    identity == device.address
                    ? " identity (its private address resolved by the kernel with the bond's IRK)"
                    : " identity \(identity) (\(device.identityType ?? "random"), resolved with its bond's IRK)"
            }
            if let rssi = device.rssi { line += " \(rssi) dBm" }
            if let name = device.localName { line += " \"\(name)\"" }
            if !device.serviceUUIDs.isEmpty { line += " services \(device.serviceUUIDs.joined(separator: ","))" }
            if let power = device.txPower { line += " tx \(power) dBm" }
            if let version = device.version { line += " version \(version)" }
            if let beacon = device.iBeacon {
                line += " iBeacon \(beacon.uuid) major \(beacon.major) minor \(beacon.minor)"
            } else if let maker = device.manufacturer {
                line += " manufacturer 0x\(String(maker.companyID, radix: 16)) \(maker.data)"
            }
            Terminal.standardOutput.writeLine(line)
        }
    }
}
