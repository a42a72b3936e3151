import BleotaLink
import Foundation
import Glibc
import Synchronization

/// Paths that must not outlive the process — a temporary file beside a target
/// being written atomically, a symlink to a pseudo-terminal — removed when
/// their owner is done, and also when the process is told to stop
/// (SIGINT, SIGTERM, SIGHUP): the first registration adds a termination hook to
/// ``ProcessSignals`` that removes every registered path before the signal ends
/// the process as it would have (so the exit status still says which signal).
public final class TemporaryPaths: Sendable {
    private static let registered = Mutex<[UInt64: [String]]>([:])
    private static let nextID = Mutex<UInt64>(0)
    private static let hooked = Mutex<Bool>(false)

    /// Makes the next SIGINT (Ctrl-C) call `handler` instead of ending the process
    /// (``ProcessSignals/interceptNextInterrupt(_:endingAtOnce:)``; registered paths are still removed when a signal ends it).
    public static func interceptNextInterrupt(_ handler: @escaping @Sendable () -> Void) {
        hookOnce()
        ProcessSignals.interceptNextInterrupt(handler)
    }

    /// Lets SIGINT end the process again.
    public static func stopInterceptingInterrupts() { ProcessSignals.stopInterceptingInterrupts() }

    private let id: UInt64

    private init(id: UInt64) { self.id = id }

    /// Registers `paths` for removal at the latest when the process ends by a signal.
    public static func removingOnExit(_ paths: [String]) -> TemporaryPaths {
        hookOnce()
        let id = nextID.withLock { value -> UInt64 in
            value += 1
            return value
        }
        registered.withLock { $0[id] = paths }
        return TemporaryPaths(id: id)
    }

    /// Removes the paths now and forgets them.
    public func removeNow() {
        let paths = Self.registered.withLock { $0.removeValue(forKey: id) } ?? []
        for path in paths { Self.remove(path) }
    }

    /// A file or link, or an empty directory (registered after the files in it).
    private static func remove(_ path: String) {
        if unlink(path) != 0, errno == EISDIR || errno == EPERM { rmdir(path) }
    }

    /// Forgets the paths without removing them (the owner kept them: a rename went through).
    public func keep() {
        _ = Self.registered.withLock { $0.removeValue(forKey: id) }
    }

    /// Adds, synchronously and once, the hook that removes every registered path when a signal ends the process.
    private static func hookOnce() {
        let first = hooked.withLock { hooked -> Bool in
            defer { hooked = true }
            return !hooked
        }
        guard first else { return }
        ProcessSignals.onTermination {
            let all = registered.withLock { registered -> [String] in
                defer { registered = [:] }
                return registered.values.flatMap { $0 }
            }
            for path in all { remove(path) }
        }
    }
}
