import Dispatch
import Glibc
import Synchronization

/// Paths that must not outlive the process — a temporary file beside a target
/// being written atomically, a symlink to a pseudo-terminal — removed when
/// their owner is done, and also when the process is told to stop
/// (SIGINT, SIGTERM, SIGHUP): the first registration installs handlers that
/// remove every registered path and then let the signal end the process as it
/// would have (so the exit status still says which signal).
public final class TemporaryPaths: Sendable {
    private static let registered = Mutex<[UInt64: [String]]>([:])
    private static let nextID = Mutex<UInt64>(0)
    private static let handlers = Mutex<[any DispatchSourceSignal]>([])

    private let id: UInt64

    private init(id: UInt64) { self.id = id }

    /// Registers `paths` for removal at the latest when the process ends by a signal.
    public static func removingOnExit(_ paths: [String]) -> TemporaryPaths {
        installHandlersOnce()
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
        for path in paths { unlink(path) }
    }

    /// Forgets the paths without removing them (the owner kept them: a rename went through).
    public func keep() {
        _ = Self.registered.withLock { $0.removeValue(forKey: id) }
    }

    private static func installHandlersOnce() {
        handlers.withLock { handlers in
            guard handlers.isEmpty else { return }
            for number in [SIGINT, SIGTERM, SIGHUP] {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler {
                    let all = registered.withLock { registered -> [String] in
                        defer { registered = [:] }
                        return registered.values.flatMap { $0 }
                    }
                    for path in all { unlink(path) }
                    signal(number, SIG_DFL)
                    raise(number)
                }
                source.resume()
                handlers.append(source)
            }
        }
    }
}
