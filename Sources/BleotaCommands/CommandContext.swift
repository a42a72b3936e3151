import BleotaEngine

/// The protocols the running commands know: bleota's built-in ones, or a
/// vendor's registry when bleota's commands run as a library
/// (``BleotaCommand/run(arguments:registry:)``).
enum CommandContext {
    @TaskLocal static var registry: ProtocolRegistry = .builtIn
}
