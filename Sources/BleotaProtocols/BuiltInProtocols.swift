import BleotaEngine

extension ProtocolRegistry {
    /// bleota's built-in protocols, in order of preference when several fit:
    /// its own first, then MCUmgr's SMP (which an MCUboot image picks by itself).
    public static let builtIn = ProtocolRegistry([NativeProtocol(), SMPProtocol()])
}
