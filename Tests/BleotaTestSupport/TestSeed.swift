import BleotaLink
import Foundation

/// The seed a test's random inputs come from, printed so a failure can be
/// replayed: each test has a fixed seed of its own (so CI runs are
/// repeatable), and `BLEOTA_TEST_SEED=N` replaces it to explore or replay.
public func testSeed(_ name: String, file: String = #fileID) -> UInt64 {
    let seed: UInt64
    if let text = ProcessInfo.processInfo.environment["BLEOTA_TEST_SEED"], let value = UInt64(text) {
        seed = value
    } else {
        // FNV-1a of the test's name: stable across runs and machines.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in "\(file):\(name)".utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        seed = hash
    }
    print("random inputs of \(name): seed \(seed) (replay with BLEOTA_TEST_SEED=\(seed))")
    return seed
}

/// A generator seeded by ``testSeed(_:file:)``.
public func seededGenerator(_ name: String, file: String = #fileID) -> SeededRandom {
    SeededRandom(seed: testSeed(name, file: file))
}
