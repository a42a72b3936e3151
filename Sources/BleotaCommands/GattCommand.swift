import ArgumentParser
import BleotaATT
import BleotaBlueZ
import BleotaCodec
import BleotaEngine
import BleotaLink
import Foundation
import Logging
import Synchronization

/// `bleota gatt …`: poke at a device's GATT database by hand.
struct GattCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt",
        abstract: "Discover, read and write a device's GATT attributes.",
        subcommands: [GattDiscover.self, GattRead.self, GattWrite.self, GattSubscribe.self]
    )
}

struct GattDevice: ParsableArguments {
    @Option(name: .long, help: "The device: ble://AA:BB:CC:DD:EE:FF[?type=random&adapter=hci0&security=medium&phy=2m&interval=7.5-15].") var device: String
    @Option(
        name: .customLong("connect-timeout"), help: "Time to wait for the connection, in seconds or with a unit (500ms; 0.1…3600 s, default 10 s).", transform: TimeArgument.parse)
    var connectTime = TimeArgument(seconds: 10)
    var connectTimeout: Double { connectTime.seconds() }
    @OptionGroup var pairing: PairingOptions

    /// What an operation's failure exits with: a pairing that failed is the pairing's status, anything else `status`.
    func failure(_ error: any Error, _ what: String, status: ExitStatus = .deviceError) -> CommandFailure {
        if case ATTBearerError.security(let pairingError) = error { return CommandFailure(.pairingFailed, "\(device): \(pairingError)") }
        return CommandFailure(status, "\(what): \(error)")
    }

    /// Closes the connection and says what protected it, when it was encrypted (on stderr, so values stay alone on stdout).
    func close(_ connection: ATTConnection, json: Bool) async -> LinkSecurityState? {
        let security = await connection.security.security
        await connection.close("done")
        await PairingService.shared.stopAll()
        guard security.level > .low else { return nil }
        if !json { Terminal.standardError.writeLine("link security: \(security)") }
        return security
    }

    func validate() throws {
        _ = try connectTime.checkedSeconds(option: "--connect-timeout", range: 0.1...3600)
    }

    func connect() async throws -> ATTConnection {
        guard case .success(let target) = BLEDeviceAddress.parse(device) else {
            if case .failure(let error) = BLEDeviceAddress.parse(device) { throw CommandFailure(.usage, error.description) }
            throw CommandFailure(.usage, "bad device")
        }
        _ = try requireBluetooth(adapter: target.adapter)
        do {
            let connection = try await ATTConnection.open(
                target, timeout: .milliseconds(Int64(connectTimeout * 1000)), clock: SystemClock(),
                pairing: pairing.policy)
            _ = try await connection.client.exchangeMTU()
            return connection
        } catch LinkError.security(let pairingError) {
            throw CommandFailure(.pairingFailed, "\(device): \(pairingError)")
        } catch {
            throw CommandFailure(.linkLost, "\(error)")
        }
    }
}

struct GattDiscover: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "discover", abstract: "List services, characteristics and descriptors.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: GattDevice

    struct Report: Codable {
        struct Characteristic: Codable {
            var uuid: String
            var handle: UInt16
            var properties: UInt8
            var descriptors: [String]
        }
        struct Service: Codable {
            var uuid: String
            var start: UInt16
            var end: UInt16
            var characteristics: [Characteristic]
        }
        var mtu: Int
        var connection: ConnectionSettings?
        var services: [Service]
        var security: LinkSecurityState?
    }

    func run() async throws {
        let connection = try await target.connect()
        var report = Report(mtu: await connection.bearer.mtu, connection: connection.settings, services: [])
        do {
            for service in try await connection.client.discoverPrimaryServices() {
                var entry = Report.Service(uuid: service.uuid.description, start: service.start, end: service.end, characteristics: [])
                for characteristic in try await connection.client.discoverCharacteristics(service) {
                    let descriptors = try await connection.client.discoverDescriptors(characteristic)
                    entry.characteristics.append(
                        .init(
                            uuid: characteristic.uuid.description, handle: characteristic.valueHandle,
                            properties: characteristic.properties.rawValue,
                            descriptors: descriptors.map { $0.uuid.description }))
                }
                report.services.append(entry)
            }
        } catch {
            await connection.close("done")
            throw target.failure(error, "discovery failed")
        }
        report.security = await target.close(connection, json: global.json)
        if global.json {
            Terminal.standardOutput.writeLine(try JSONOutput.string(report))
            return
        }
        var lines = ["MTU \(report.mtu)"]
        if let settings = report.connection {
            if !settings.summary.isEmpty { lines.append("link \(settings.summary)") }
            lines += settings.notes.map { "note: \($0)" }
        }
        for service in report.services {
            lines.append("service \(service.uuid) handles 0x\(String(service.start, radix: 16))–0x\(String(service.end, radix: 16))")
            for characteristic in service.characteristics {
                lines.append(
                    "  characteristic \(characteristic.uuid) value handle 0x\(String(characteristic.handle, radix: 16)) properties 0x\(String(characteristic.properties, radix: 16))"
                        + (characteristic.descriptors.isEmpty ? "" : " descriptors \(characteristic.descriptors.joined(separator: ", "))"))
            }
        }
        Terminal.standardOutput.writeLine(lines.joined(separator: "\n"))
    }
}

func parseHandle(_ text: String) throws -> UInt16 {
    let hex = text.lowercased().hasPrefix("0x")
    guard let value = UInt16(hex ? String(text.dropFirst(2)) : text, radix: hex ? 16 : 10), value > 0 else {
        throw ValidationError("'\(text)' is not an attribute handle: use 1…0xFFFF")
    }
    return value
}

struct GattWrite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "write", abstract: "Write an attribute's value (long values with prepare/execute).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: GattDevice
    @Option(name: .long, help: "The attribute handle (decimal or 0x-hex).", transform: parseHandle) var handle: UInt16
    @Option(name: .long, help: "The value as hex (e.g. 0100).") var hex: String
    @Flag(name: .long, help: "Write without response (a command; no acknowledgement).") var withoutResponse = false

    func validate() throws {
        guard [UInt8](hex: hex) != nil else { throw ValidationError("--hex '\(hex)' is not hex: write pairs of digits like 0a1b") }
    }

    func run() async throws {
        let value = [UInt8](hex: hex)!
        let connection = try await target.connect()
        do {
            if withoutResponse { try await connection.client.writeWithoutResponse(handle, value) } else { try await connection.client.write(handle, value) }
        } catch {
            await connection.close("done")
            throw target.failure(error, "write to handle 0x\(String(handle, radix: 16)) failed")
        }
        let security = await target.close(connection, json: global.json)
        if global.json {
            struct Output: Codable {
                var written: Int
                var security: LinkSecurityState?
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Output(written: value.count, security: security)))
        } else {
            Terminal.standardOutput.writeLine("wrote \(value.count) bytes to handle 0x\(String(handle, radix: 16))")
        }
    }
}

struct GattSubscribe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "subscribe", abstract: "Enable notifications (or indications) of a characteristic and print what arrives.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: GattDevice
    @Option(name: .long, help: "The characteristic's value handle (decimal or 0x-hex).", transform: parseHandle) var handle: UInt16
    @Flag(name: .long, help: "Ask for indications instead of notifications.") var indications = false
    @Option(name: .customLong("duration"), help: "Stop after this long, in seconds or with a unit (at most 86400 s, default 10 s).", transform: TimeArgument.parse) var runTime =
        TimeArgument(seconds: 10)
    var duration: Double { runTime.seconds() }
    @Option(name: .long, help: "Stop after this many values.") var count: Int?
    @Option(
        name: .customLong("write-handle"), help: "After subscribing, write --write-hex here without response (to send a request and watch its answer).",
        transform: parseHandle) var writeHandle: UInt16?
    @Option(name: .customLong("write-hex"), help: "The value to write to --write-handle, as hex.") var writeHex: String?

    func validate() throws {
        _ = try runTime.checkedSeconds(option: "--duration", range: 0...86_400)
        if let count, count < 1 { throw ValidationError("--count \(count) is out of range: use 1 or more") }
        if (writeHandle == nil) != (writeHex == nil) {
            throw ValidationError("--write-handle and --write-hex go together: give both or neither")
        }
        if let writeHex, [UInt8](hex: writeHex) == nil {
            throw ValidationError("--write-hex '\(writeHex)' is not hex: write pairs of digits like 0a1b")
        }
    }

    func run() async throws {
        let connection = try await target.connect()
        // The CCCD follows the value: discover it within the characteristic's range.
        let characteristic = GATTCharacteristic(
            uuid: .bit16(0), properties: [.notify], declaration: handle - 1,
            valueHandle: handle, end: min(0xFFFF, handle + 3))
        do { try await connection.client.subscribe(characteristic, indications: indications) } catch {
            await connection.close("done")
            throw target.failure(error, "cannot subscribe to handle 0x\(String(handle, radix: 16))")
        }
        if let writeHandle, let writeHex, let value = [UInt8](hex: writeHex) {
            do { try await connection.client.writeWithoutResponse(writeHandle, value) } catch {
                await connection.close("done")
                throw CommandFailure(.deviceError, "cannot write to handle 0x\(String(writeHandle, radix: 16)): \(error)")
            }
        }
        var received = 0
        // One clock for the deadline and each wait on it.
        let clock = SystemClock()
        let deadline = clock.now + .milliseconds(Int64(duration * 1000))
        while clock.now < deadline, count.map({ received < $0 }) ?? true {
            let left = deadline - clock.now
            // try? flattens: nil on timeout, on a closed bearer, or at the end of the stream.
            guard let pdu = try? await withDeadline(left, clock: clock, operation: { try await connection.bearer.incoming.take() })
            else { break }
            switch pdu {
            case .handleValueNotification(let h, let value), .handleValueIndication(let h, let value):
                received += 1
                Terminal.standardOutput.writeLine(global.json ? #"{ "handle" : \#(h), "hex" : "\#(value.hexString)" }"# : "0x\(String(h, radix: 16)): \(value.hexString)")
            default:
                continue
            }
        }
        _ = await target.close(connection, json: global.json)
    }
}

struct GattRead: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "read", abstract: "Read an attribute's value (long values with Read Blob).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: GattDevice
    @Option(
        name: .long, help: "The attribute handle (decimal or 0x-hex).",
        transform: { text in
            guard let value = UInt16(text.lowercased().hasPrefix("0x") ? String(text.dropFirst(2)) : text, radix: text.lowercased().hasPrefix("0x") ? 16 : 10),
                value > 0
            else { throw ValidationError("'\(text)' is not an attribute handle: use 1…0xFFFF") }
            return value
        }) var handle: UInt16

    func run() async throws {
        let connection = try await target.connect()
        let value: [UInt8]
        do { value = try await connection.client.read(handle) } catch {
            await connection.close("done")
            throw target.failure(error, "read of handle 0x\(String(handle, radix: 16)) failed")
        }
        let security = await target.close(connection, json: global.json)
        if global.json {
            struct Output: Codable {
                var handle: UInt16
                var hex: String
                var text: String?
                var security: LinkSecurityState?
            }
            Terminal.standardOutput.writeLine(
                try JSONOutput.string(
                    Output(
                        handle: handle, hex: value.hexString, text: String(validating: value, as: UTF8.self),
                        security: security)))
        } else {
            Terminal.standardOutput.writeLine(value.hexString + (String(validating: value, as: UTF8.self).map { "  \"\($0)\"" } ?? ""))
        }
    }
}
