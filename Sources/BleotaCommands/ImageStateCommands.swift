import ArgumentParser
import BleotaCodec
import BleotaEngine
import Foundation
import Logging

/// `bleota image state`: read, or mark for test / confirm, a device's image slots.
struct ImageState: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "state",
        abstract: "Show a device's image slots; --test HASH or --confirm [--hash HASH] change them.",
        discussion:
            "--test marks the image with that hash for one test boot (MCUboot reverts it unless confirmed); --confirm makes the running image (or the one with --hash) permanent.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var protocolOption: ProtocolChoice
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
        var change: ImageStateChange?
        if let test = self.test.flatMap({ [UInt8](hex: $0) }) { change = .test(hash: test) } else if confirm { change = .confirm(hash: hash.flatMap { [UInt8](hex: $0) }) }
        let requested = change
        let state = try await manage(
            deviceOptions, protocolName: protocolOption.name, needs: .imageState,
            logger: global.makeLogger("bleota.image")
        ) { host throws(TransferError) in try await host.imageState(requested) }
        if global.json {
            struct Slot: Codable {
                var image: Int, slot: Int, version: String, hash: String
                var bootable: Bool, pending: Bool, confirmed: Bool, active: Bool, permanent: Bool
            }
            let rows = state.slots.map {
                Slot(
                    image: $0.image, slot: $0.slot, version: $0.version, hash: $0.hash.hexString, bootable: $0.bootable,
                    pending: $0.pending, confirmed: $0.confirmed, active: $0.active, permanent: $0.permanent)
            }
            struct Listing: Codable {
                var images: [Slot]
                var bootloader: String?
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Listing(images: rows, bootloader: state.bootloader)))
            return
        }
        var lines: [String] = []
        for slot in state.slots {
            let flags = [
                ("active", slot.active), ("confirmed", slot.confirmed), ("pending", slot.pending),
                ("permanent", slot.permanent), ("bootable", slot.bootable),
            ].filter(\.1).map(\.0)
            lines.append("image \(slot.image) slot \(slot.slot): \(slot.version)  \(flags.joined(separator: " "))")
            lines.append("  hash \(slot.hash.hexString)")
        }
        if let bootloader = state.bootloader { lines.append("bootloader: \(bootloader)") }
        Terminal.standardOutput.writeLine(lines.isEmpty ? "no images" : lines.joined(separator: "\n"))
    }
}

/// `bleota image erase`: empty a device's secondary (staging) slot.
struct ImageErase: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "erase", abstract: "Erase a device's secondary slot (refused while an image there is pending or a test image runs unconfirmed).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var protocolOption: ProtocolChoice

    func run() async throws {
        try await manage(
            deviceOptions, protocolName: protocolOption.name, needs: .eraseStaging,
            logger: global.makeLogger("bleota.image")
        ) { host throws(TransferError) in try await host.eraseStaging() }
        Terminal.standardOutput.writeLine(global.json ? #"{ "erased" : 1 }"# : "erased slot 1 of \(deviceOptions.device)")
    }
}
