import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import Foundation

// bleota's benchmark: prints a table and writes JSON (default
// `.build/bench.json`, or the path given with --json PATH). Figures, not
// pass/fail: targets are printed next to each figure for the reader.

struct Figure: Codable {
    var name: String
    var value: Double
    var unit: String
    var target: String?
}

var figures: [Figure] = []
@MainActor func record(_ name: String, _ value: Double, _ unit: String, target: String? = nil) {
    figures.append(Figure(name: name, value: value, unit: unit, target: target))
    let shown = value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
    print(name.padding(toLength: 52, withPad: " ", startingAt: 0), shown.leftPadded(10), unit.padding(toLength: 10, withPad: " ", startingAt: 0), target ?? "")
}

extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: " ", count: max(0, width - count)) + self }
}

func wallSeconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func wallSeconds(_ body: () async throws -> Void) async rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try await body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func pseudoRandom(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
    var state = seed
    var bytes = [UInt8](repeating: 0, count: count)
    for index in 0..<count {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        bytes[index] = UInt8(truncatingIfNeeded: state >> 33)
    }
    return bytes
}

let arguments = CommandLine.arguments
let jsonPath = arguments.firstIndex(of: "--json").flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil } ?? ".build/bench.json"

print("bleota benchmark — \(ProcessInfo.processInfo.processorCount) cores, \(ProcessInfo.processInfo.operatingSystemVersionString)")
print("")

// Checksums over 64 MiB.
let big = pseudoRandom(64 << 20)
let crcTime = wallSeconds { _ = CRC32.checksum(big) }
record("CRC-32 (zlib)", Double(big.count) / crcTime / 1e6, "MB/s")
let shaTime = wallSeconds { _ = SHA256Digest.hash(big) }
record("SHA-256 (swift-crypto)", Double(big.count) / shaTime / 1e6, "MB/s")

// Engine over an in-memory loopback link, no link model: how fast the engine
// and the native device half can go, 244-byte packets.
do {
    let stream = Array(big.prefix(16 << 20))
    let storage = DeviceStorage(slotSize: stream.count)
    storage.withState { $0.bootToBootloader = true }
    let device = NativeDevice(name: "bench", storage: storage, bufferCount: 64, maximumPacket: 244 + NativeMessage.dataHeaderSize)
    let (host, deviceEnd) = LoopbackLink.pair(maximumPayload: 244 + NativeMessage.dataHeaderSize)
    let clock = SystemClock()
    let environment = NativeDeviceEnvironment(clock: clock) { _ in }
    Task { await device.serve(deviceEnd, environment: environment) }
    let start = NativeMessage.Start(target: .test, compressed: false, imageSize: UInt32(stream.count), streamSize: UInt32(stream.count),
                                    crc32: CRC32.checksum(stream), sha256: SHA256Digest.hash(stream), packetSize: 244, ackInterval: 16, label: "")
    try await host.send(NativeMessage.start(start).encode())
    _ = try await host.receive()
    let engine = TransferEngine(stream: stream, packetSize: 244, wire: NativeWire(),
                                tuning: TransferTuning(window: 64, ackInterval: 16), clock: clock)
    let seconds = try await wallSeconds { try await engine.run(over: host) }
    record("engine loopback, 244-byte packets (16 MiB)", Double(stream.count) / seconds / 1e6, "MB/s", target: "≥ 100 MB/s")
    await host.close()
}

let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
try encoder.encode(figures).write(to: URL(fileURLWithPath: jsonPath))
print("")
print("wrote \(jsonPath)")
