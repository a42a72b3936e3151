import ArgumentParser
import BleotaCodec
import BleotaEngine
import Foundation
import Logging

/// Runs one device-management exchange: resolves the protocol (which must
/// have `needs`), opens the device and calls `body` with the protocol's host half.
func manage<T: Sendable>(
    _ device: DeviceOptions, protocolName: String?, needs: ProtocolCapabilities, logger: Logger,
    _ body: @escaping @Sendable (any ProtocolHost) async throws(TransferError) -> T
) async throws -> T {
    let updateProtocol = try await device.device.resolveProtocol(
        explicit: protocolName, needs: needs,
        timeout: device.timeouts.connect, pairing: device.pairing.policy, logger: logger)
    let timeouts = device.timeouts
    let name = updateProtocol.name
    return try await device.device.session(protocol: updateProtocol, logger: logger, pairing: device.pairing.policy) { connector, clock in
        let context = HostContext(protocolName: name, connector: connector, clock: clock, timeouts: timeouts, logger: logger)
        do throws(TransferError) { return try await body(updateProtocol.makeHost(context)) } catch { throw error.commandFailure }
    }.value
}

/// `bleota echo`: is the device there and answering?
struct EchoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "echo", abstract: "Send text to a device and print its echo (protocols with an echo command, e.g. SMP).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var protocolOption: ProtocolChoice
    @Argument(help: "The text to echo (at most 4096 bytes of UTF-8).") var text: String

    func validate() throws {
        // More does not fit a device's buffer (MCUmgr's default is 2475 bytes), nor an SMP message's 16-bit length.
        guard text.utf8.count <= 4096 else {
            throw ValidationError("the text is \(text.utf8.count) bytes, more than an echo request carries: give at most 4096 bytes")
        }
    }

    func run() async throws {
        let text = self.text
        let reply = try await manage(
            deviceOptions, protocolName: protocolOption.name, needs: .echo,
            logger: global.makeLogger("bleota.echo")
        ) { host throws(TransferError) in try await host.echo(text) }
        if global.json {
            struct Echo: Codable {
                var sent: String
                var reply: String
            }
            Terminal.standardOutput.writeLine(try JSONOutput.string(Echo(sent: text, reply: reply)))
        } else {
            Terminal.standardOutput.writeLine(reply)
        }
    }
}

/// `bleota reset`: restart a device (an MCUboot device then swaps in a pending image).
struct ResetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "reset", abstract: "Reset a device (MCUboot then swaps in a pending image).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var deviceOptions: DeviceOptions
    @OptionGroup var protocolOption: ProtocolChoice

    func run() async throws {
        try await manage(
            deviceOptions, protocolName: protocolOption.name, needs: .reset,
            logger: global.makeLogger("bleota.reset")
        ) { host throws(TransferError) in try await host.reset() }
        Terminal.standardOutput.writeLine(global.json ? #"{ "reset" : true }"# : "reset \(deviceOptions.device)")
    }
}
