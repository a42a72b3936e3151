import BleotaEngine
import BleotaLink
import Synchronization
import Testing

@testable import BleotaProtocols

/// Capabilities are declared once, in ``ProtocolCapabilities``: what `bleota protocols` lists and
/// the commands check. A host half that implements an operation its protocol does not declare,
/// or declares one it leaves to the default refusal, would make the two disagree; for every
/// protocol bleota ships (built in, and each description under protocols/), each operation is
/// refused (as unsupported, before any connection is tried) exactly when it is not declared.
@Suite struct CapabilityAgreementTests {
    /// No device: an implemented operation fails reaching it (or on its input), never with a refusal
    /// before it tried; the connections asked for are counted.
    final class Unreachable: DeviceConnector {
        let asked = Mutex(0)
        var description: String { "nowhere" }
        func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
            asked.withLock { $0 += 1 }
            throw .unreachable("no device here")
        }
    }

    static let operations: [(ProtocolCapabilities, String, @Sendable (any ProtocolHost) async throws(TransferError) -> Void)] = [
        (.push, "push", { (host) async throws(TransferError) in _ = try await host.push([1, 2, 3], name: "f") }),
        (.pull, "pull", { (host) async throws(TransferError) in _ = try await host.pull("f") }),
        (
            .testTransfer, "testTransfer",
            { (host) async throws(TransferError) in _ = try await host.testTransfer(image: PreparedImage(bytes: [1, 2, 3], version: "1.0.0", summary: "")) }
        ),
        (.imageState, "imageState", { (host) async throws(TransferError) in _ = try await host.imageState(nil) }),
        (.echo, "echo", { (host) async throws(TransferError) in _ = try await host.echo("hi") }),
        (.reset, "reset", { (host) async throws(TransferError) in try await host.reset() }),
        (.eraseStaging, "eraseStaging", { (host) async throws(TransferError) in try await host.eraseStaging() }),
    ]

    static var shipped: [any UpdateProtocol] {
        get throws {
            try ProtocolRegistry.builtIn.protocols + ["protocols/telink-ota.yaml", "protocols/stm32wb-ota.yaml"].map { try DescribedProtocol(contentsOf: $0) }
        }
    }

    @Test func eachOperationIsRefusedByDefaultExactlyWhenItIsNotDeclared() async throws {
        for updateProtocol in try Self.shipped {
            for (capability, name, operation) in Self.operations {
                let refused = try await SimulationRuntime.run { runtime -> Bool in
                    let connector = Unreachable()
                    let context = HostContext(
                        protocolName: updateProtocol.name, connector: connector, clock: runtime.clock,
                        timeouts: StepTimeouts(connect: .seconds(1), response: .milliseconds(100), reboot: .seconds(1), attempts: 1))
                    do throws(TransferError) {
                        try await operation(updateProtocol.makeHost(context))
                        return false
                    } catch {
                        return error.code == .unsupported && connector.asked.withLock { $0 } == 0
                    }
                }
                #expect(
                    refused != updateProtocol.capabilities.contains(capability),
                    "\(updateProtocol.name): \(name) is \(refused ? "refused" : "implemented") but \(refused ? "declared" : "not declared")")
            }
        }
    }
}
