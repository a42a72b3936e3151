import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import Foundation
import Logging

/// Which update protocol a device speaks.
enum DeviceProtocol: String, ExpressibleByArgument, CaseIterable, Sendable {
    case auto, native, smp

    /// What `auto` means for an address: the simulator says, UDP and serial are SMP, BLE defaults to native.
    func resolved(for target: DeviceTarget) throws -> DeviceProtocol {
        switch (self, target) {
        case (.auto, .simulator(let text)):
            return (try? SimulatorAddress(parsing: text))?.deviceProtocol == "smp" ? .smp : .native
        case (.auto, .udp), (.auto, .serial): return .smp
        case (.native, .udp), (.native, .serial):
            throw CommandFailure(.usage, "UDP and serial devices speak MCUmgr/SMP: use --protocol smp (or leave it out)")
        case (.auto, .ble): return .native
        default: return self
        }
    }
}

/// Which protocol to speak, for commands that work over both.
struct ProtocolOption: ParsableArguments {
    @Option(name: .customLong("protocol"), help: "The device's protocol: auto, native or smp (MCUmgr; auto = what the address says).")
    var deviceProtocol: DeviceProtocol = .auto

    func resolved(_ device: DeviceOptions) throws -> DeviceProtocol {
        try deviceProtocol.resolved(for: try DeviceTarget(parsing: device.device))
    }
}

/// Options of SMP upgrades.
struct SMPOptions: ParsableArguments {
    @Option(name: .customLong("protocol"), help: "The device's update protocol: auto, native or smp (MCUmgr with MCUboot).")
    var deviceProtocol: DeviceProtocol = .auto

    @Option(name: .long, help: "SMP upgrade: test-and-confirm, test, confirm or upload-only.")
    var mode: SMPUpgradeMode = .testAndConfirm

    @Option(name: .long, help: "Public key (PEM or DER; ECDSA P-256 or Ed25519) the MCUboot image must be signed with.")
    var key: String?
}

extension SMPUpgradeMode: ExpressibleByArgument {}

/// Reads an MCUboot image and checks it before anything connects: the hash
/// TLV always, the signature when a key is given.
func checkedMCUbootImage(_ bytes: [UInt8], path: String, keyPath: String?) throws -> MCUbootImage {
    let image: MCUbootImage
    do { image = try MCUbootImage(decoding: bytes) } catch {
        throw CommandFailure(.badInput, "\(path) is not an MCUboot image (\(error)): sign it with imgtool, or use --protocol native")
    }
    do { try image.verifyHash() } catch { throw CommandFailure(.verificationFailed, "\(path): \(error)") }
    if let keyPath {
        let keyBytes = try readInputFile(keyPath)
        do {
            let key = try MCUbootPublicKey(keyBytes)
            try image.verifySignature(with: key)
        } catch {
            throw CommandFailure(.verificationFailed, "\(path): \(error)")
        }
    }
    return image
}

/// Opens the device for SMP and runs `operation` with an updater reporting progress.
func withSMPUpdater<T: Sendable>(global: GlobalOptions, device: DeviceOptions, tuning: TuningOptions, logger: Logger,
                                 _ operation: @escaping @Sendable (SMPUpdater) async throws -> T) async throws -> SessionOutcome<T> {
    let target = try DeviceTarget(parsing: device.device)
    let reporter = ProgressReporter.automatic(json: global.json, quiet: device.quiet)
    let timeouts = device.timeouts
    let window = tuning.window
    let chunk = tuning.packetSize
    let outcome = try await target.session(logger: logger, smp: true) { connector, clock in
        try await operation(SMPUpdater(connector: connector, clock: clock, timeouts: timeouts, window: window, chunkSize: chunk,
                                       logger: logger) { reporter.handle($0) })
    }
    reporter.finish()
    return outcome
}

/// Opens one SMP connection to the device and runs `body` on it.
func withSMPConnection<T: Sendable>(global: GlobalOptions, device: DeviceOptions, logger: Logger,
                                    _ body: @escaping @Sendable (SMPConnection, StepTimeouts) async throws -> T) async throws -> T {
    let target = try DeviceTarget(parsing: device.device)
    let timeouts = device.timeouts
    let outcome = try await target.session(logger: logger, smp: true) { connector, clock in
        let link: any Link
        do { link = try await connector.connect(for: .initial, timeout: timeouts.connect) } catch {
            throw CommandFailure(.linkLost, "cannot reach \(connector.description): \(error)")
        }
        let connection = SMPConnection(link: link, clock: clock)
        do {
            let value = try await body(connection, timeouts)
            await connection.close()
            return value
        } catch {
            await connection.close()
            throw error
        }
    }
    return outcome.value
}

extension SMPClientError {
    var commandFailure: CommandFailure {
        switch self {
        case .timeout, .linkLost: CommandFailure(.linkLost, description)
        case .malformed, .sequence, .field, .device: CommandFailure(.deviceError, description)
        }
    }
}

/// `bleota echo`: is the device there and answering SMP?
struct EchoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "echo", abstract: "Send text to an SMP device and print its echo.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @Argument(help: "The text to echo.") var text: String

    func run() async throws {
        let text = self.text
        let reply = try await withSMPConnection(global: global, device: deviceOptions, logger: global.makeLogger("bleota.echo")) { connection, timeouts in
            do { return try await connection.echo(text, timeout: timeouts.response) } catch let error as SMPClientError { throw error.commandFailure }
        }
        if global.json {
            struct Echo: Codable { var sent: String; var reply: String }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Echo(sent: text, reply: reply)))
        } else {
            Terminal.standardOutput.writeLine(reply)
        }
    }
}

/// `bleota reset`: restart an SMP device (MCUboot swaps a pending image then).
struct ResetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "reset", abstract: "Reset an SMP device (MCUboot then swaps in a pending image).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions

    func run() async throws {
        try await withSMPConnection(global: global, device: deviceOptions, logger: global.makeLogger("bleota.reset")) { connection, timeouts in
            do { try await connection.reset(timeout: timeouts.response) } catch let error as SMPClientError { throw error.commandFailure }
        }
        Terminal.standardOutput.writeLine(global.json ? #"{ "reset" : true }"# : "reset \(deviceOptions.device)")
    }
}

/// `bleota image state`: read, or mark for test / confirm, an SMP device's image slots.
struct ImageState: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "state",
        abstract: "Show an SMP device's image slots; --test HASH or --confirm [--hash HASH] change them.",
        discussion: "--test marks the image with that hash for one test boot (MCUboot reverts it unless confirmed); --confirm makes the running image (or the one with --hash) permanent.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @Option(name: .long, help: "Mark the image with this SHA-256 (hex, its hash TLV) for a test boot.") var test: String?
    @Flag(name: .long, help: "Confirm the running image, or the one named by --hash.") var confirm = false
    @Option(name: .long, help: "With --confirm: the image to confirm (hex SHA-256).") var hash: String?

    func validate() throws {
        if test != nil && confirm { throw ValidationError("--test and --confirm exclude each other: give one") }
        if hash != nil && !confirm { throw ValidationError("--hash goes with --confirm") }
        for value in [test, hash].compactMap({ $0 }) where [UInt8](hex: value)?.count != 32 {
            throw ValidationError("'\(value)' is not a SHA-256: write 64 hex digits (bleota image info shows an image's)")
        }
    }

    func run() async throws {
        let test = self.test.flatMap { [UInt8](hex: $0) }
        let hash = self.hash.flatMap { [UInt8](hex: $0) }
        let confirm = self.confirm
        let (slots, bootloader) = try await withSMPConnection(global: global, device: deviceOptions, logger: global.makeLogger("bleota.image")) { connection, timeouts in
            do {
                let slots: [SMPImageSlot]
                if let test { slots = try await connection.setImageState(hash: test, confirm: false, timeout: timeouts.response) }
                else if confirm { slots = try await connection.setImageState(hash: hash, confirm: true, timeout: timeouts.response) }
                else { slots = try await connection.imageState(timeout: timeouts.response) }
                // Not every device answers bootloader info; the slots are what was asked for.
                let info = try? await connection.bootloaderInfo(timeout: timeouts.response)
                return (slots, info.map { $0.name + ($0.mode.map { " (\(mcubootModeName($0)))" } ?? "") })
            } catch let error as SMPClientError { throw error.commandFailure }
        }
        if global.json {
            struct Slot: Codable {
                var image: Int, slot: Int, version: String, hash: String
                var bootable: Bool, pending: Bool, confirmed: Bool, active: Bool, permanent: Bool
            }
            let rows = slots.map { Slot(image: $0.image, slot: $0.slot, version: $0.version, hash: $0.hash.hexString, bootable: $0.bootable,
                                        pending: $0.pending, confirmed: $0.confirmed, active: $0.active, permanent: $0.permanent) }
            struct Listing: Codable { var images: [Slot]; var bootloader: String? }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Listing(images: rows, bootloader: bootloader)))
            return
        }
        var lines: [String] = []
        for slot in slots {
            let flags = [("active", slot.active), ("confirmed", slot.confirmed), ("pending", slot.pending),
                         ("permanent", slot.permanent), ("bootable", slot.bootable)].filter(\.1).map(\.0)
            lines.append("image \(slot.image) slot \(slot.slot): \(slot.version)  \(flags.joined(separator: " "))")
            lines.append("  hash \(slot.hash.hexString)")
        }
        if let bootloader { lines.append("bootloader: \(bootloader)") }
        Terminal.standardOutput.writeLine(lines.isEmpty ? "no images" : lines.joined(separator: "\n"))
    }
}

/// `bleota image erase`: empty an SMP device's secondary slot.
struct ImageErase: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "erase", abstract: "Erase an SMP device's secondary slot (refused while an image there is pending).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions

    func run() async throws {
        try await withSMPConnection(global: global, device: deviceOptions, logger: global.makeLogger("bleota.image")) { connection, timeouts in
            do { try await connection.eraseSecondarySlot(timeout: timeouts.response) } catch let error as SMPClientError { throw error.commandFailure }
        }
        Terminal.standardOutput.writeLine(global.json ? #"{ "erased" : 1 }"# : "erased slot 1 of \(deviceOptions.device)")
    }
}

/// MCUboot's modes as the bootloader info command numbers them.
func mcubootModeName(_ mode: Int) -> String {
    switch mode {
    case 0: "application"
    case 1: "swap using scratch"
    case 2: "overwrite only"
    case 3: "swap without scratch"
    case 4: "direct XIP without revert"
    case 5: "direct XIP with revert"
    case 6: "RAM loader"
    default: "mode \(mode)"
    }
}

/// What `image info` adds for an MCUboot image.
struct MCUbootReport: Codable, Equatable {
    struct TLVEntry: Codable, Equatable { var type: UInt16; var name: String; var length: Int; var protected: Bool }
    var version: String
    var headerSize: Int
    var imageSize: Int
    var loadAddress: UInt32
    var flags: UInt32
    var tlvs: [TLVEntry]
    var hash: String?
    var hashValid: Bool
    var keyHash: String?
    var signature: String?
    var signatureVerified: Bool?
    var problem: String?

    init(_ image: MCUbootImage, key: MCUbootPublicKey?) {
        version = image.version.description
        headerSize = image.headerSize
        imageSize = image.imageSize
        loadAddress = image.loadAddress
        flags = image.flags
        tlvs = image.tlvs.map { TLVEntry(type: $0.type, name: $0.name, length: $0.value.count, protected: $0.isProtected) }
        hash = image.hashTLV?.hexString
        hashValid = (try? image.verifyHash()) != nil
        keyHash = image.tlv(MCUbootImage.TLVType.keyHash)?.value.hexString
        switch image.signature {
        case .ecdsaP256?: signature = "ECDSA P-256"
        case .ed25519?: signature = "Ed25519"
        case .other(let type)?: signature = "TLV 0x\(String(type, radix: 16))"
        case nil: signature = nil
        }
        do { try image.verifyHash() } catch { problem = error.description }
        if let key {
            do {
                try image.verifySignature(with: key)
                signatureVerified = true
            } catch {
                signatureVerified = false
                problem = problem ?? error.description
            }
        }
    }

    var lines: [String] {
        var lines = ["mcuboot:   version \(version), header \(headerSize) bytes, image \(imageSize) bytes, load \(hex32(loadAddress)), flags \(hex32(flags))"]
        for tlv in tlvs { lines.append("  tlv 0x\(String(tlv.type, radix: 16)) \(tlv.name), \(tlv.length) bytes\(tlv.protected ? " (protected)" : "")") }
        lines.append("  hash:      \(hash ?? "none") \(hashValid ? "(matches the image)" : "(DOES NOT MATCH)")")
        if let keyHash { lines.append("  key hash:  \(keyHash)") }
        lines.append("  signature: \(signature ?? "none")" + (signatureVerified.map { $0 ? " (verified with the given key)" : " (DOES NOT VERIFY with the given key)" } ?? ""))
        if let problem { lines.append("  problem:   \(problem)") }
        return lines
    }
}
