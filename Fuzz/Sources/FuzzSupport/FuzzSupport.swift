import BleotaLink
import CLibFuzzer
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What every fuzz target shares: the libFuzzer driver, invariant checks,
/// carving structured input out of libFuzzer's bytes, and running async
/// device code to completion from libFuzzer's synchronous callback.
public enum Fuzzer {
    public typealias Callback = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32

    /// Runs libFuzzer with the process's arguments (`-runs=N`, corpus
    /// directories, …) on `callback`, the target's `LLVMFuzzerTestOneInput`.
    public static func main(_ callback: Callback) -> Never {
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, callback))
    }

    /// libFuzzer's input as an array (it may pass a null pointer for size 0).
    public static func bytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
        guard let data, size > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: data, count: size))
    }
}

/// Stops the run with a message when an invariant does not hold: libFuzzer
/// sees the trap, saves the input as a crash and reports it.
public func invariant(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
    file: StaticString = #fileID, line: UInt = #line
) {
    if !condition() {
        fatalError("invariant violated: \(message())", file: file, line: line)
    }
}

/// Carves values from the input front to back; every read is total (short
/// input gives short or nil results), so any byte string is a valid script.
public struct InputCursor {
    public let bytes: [UInt8]
    public private(set) var index = 0

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var isAtEnd: Bool { index >= bytes.count }

    public mutating func byte() -> UInt8? {
        guard index < bytes.count else { return nil }
        defer { index += 1 }
        return bytes[index]
    }

    /// Up to `count` bytes.
    public mutating func take(_ count: Int) -> [UInt8] {
        let end = min(bytes.count, index + max(0, count))
        defer { index = end }
        return Array(bytes[index..<end])
    }

    /// A length byte, then up to that many bytes; nil once the input is used up.
    public mutating func chunk() -> [UInt8]? {
        guard let length = byte() else { return nil }
        return take(Int(length))
    }

    /// A big-endian 16-bit length, then up to that many bytes; nil at the end.
    public mutating func longChunk() -> [UInt8]? {
        guard let high = byte() else { return nil }
        let low = byte() ?? 0
        return take(Int(high) << 8 | Int(low))
    }

    public mutating func rest() -> [UInt8] { take(bytes.count - index) }
}

/// Splits `bytes` at LF, as the text parsers and the serial decoder see lines.
public func lines(of bytes: [UInt8]) -> [ArraySlice<UInt8>] {
    bytes.split(separator: 0x0A, omittingEmptySubsequences: false)
}

/// Runs `body` to completion on the concurrency pool and waits for it. The
/// fuzzer's thread is not a pool thread, so blocking it cannot deadlock.
public func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let result = Mutex<T?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        let value = await body()
        result.withLock { $0 = value }
        done.signal()
    }
    done.wait()
    return result.withLock { $0! }
}

/// A clock whose sleeps return at once, moving time forward: device code that
/// waits for flash or processing time runs at full speed under the fuzzer.
public final class InstantClock: BleotaClock {
    private let current = Mutex<Duration>(.zero)

    public init() {}

    public var now: Duration { current.withLock { $0 } }

    public func sleep(until deadline: Duration) async throws {
        current.withLock { $0 = max($0, deadline) }
    }
}

/// A link that delivers a fixed list of packets to whoever receives, then
/// reports a disconnect; it records what is sent to it.
public final class ScriptedLink: Link {
    public let parameters: LinkParameters
    private struct State {
        var incoming: [[UInt8]]
        var next = 0
        var sent: [[UInt8]] = []
        var closed = false
    }
    private let state: Mutex<State>

    public init(packets: [[UInt8]], maximumPayload: Int) {
        parameters = LinkParameters(maximumPayload: maximumPayload, description: "fuzz")
        state = Mutex(State(incoming: packets))
    }

    public var sent: [[UInt8]] { state.withLock { $0.sent } }

    /// Records the packet whatever its size: the target checks sizes itself, so
    /// an oversized packet is reported as the device's fault, not hidden.
    public func send(_ packet: [UInt8]) async throws(LinkError) {
        try state.withLock { (state: inout State) throws(LinkError) in
            guard !state.closed else { throw LinkError.disconnected("closed") }
            state.sent.append(packet)
        }
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        try state.withLock { (state: inout State) throws(LinkError) -> [UInt8] in
            guard !state.closed, state.next < state.incoming.count else { throw LinkError.disconnected("end of input") }
            defer { state.next += 1 }
            return state.incoming[state.next]
        }
    }

    public func close() async { state.withLock { $0.closed = true } }
}
