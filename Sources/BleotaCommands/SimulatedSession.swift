import BleotaEngine
import BleotaLink
import Logging

/// Runs a command's body against the built-in simulator.
enum SimulatedSession {
    static func run<T: Sendable>(
        address: String, logger: Logger,
        _ body: @escaping @Sendable (any DeviceConnector, any BleotaClock) async throws -> T
    ) async throws -> SessionOutcome<T> {
        throw CommandFailure(.failure, "the simulator is not wired in yet")
    }
}
