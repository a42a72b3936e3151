import Foundation
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
    private static let handlers = Mutex<Bool>(false)
    /// What the first SIGINT does instead of ending the process (a fleet stops starting devices).
    private static let interruptHandler = Mutex<(@Sendable () -> Void)?>(nil)

    /// Makes the next SIGINT (Ctrl-C) call `handler` instead of ending the process; a second
    /// one ends it as usual (registered paths removed first). SIGTERM and SIGHUP still end it at once.
    public static func interceptNextInterrupt(_ handler: @escaping @Sendable () -> Void) {
        installHandlersOnce()
        interruptHandler.withLock { $0 = handler }
    }

    /// Lets SIGINT end the process again.
    public static func stopInterceptingInterrupts() { interruptHandler.withLock { $0 = nil } }

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

    /// The pipe the signal handler writes the signal's number to: a write is
    /// all a handler may safely do. Set once, before any handler is installed.
    private nonisolated(unsafe) static var signalPipe: (read: Int32, write: Int32) = (-1, -1)

    /// Installs, synchronously and for the whole process, handlers for SIGINT,
    /// SIGTERM and SIGHUP that pass the signal to a thread of their own through
    /// a pipe. That thread removes every registered path, restores the default
    /// action and sends the signal again, so the process ends as it would have.
    /// (A dispatch signal source is armed asynchronously, on another thread, after
    /// the signal has been set to be ignored: a signal in between was lost.)
    private static func installHandlersOnce() {
        handlers.withLock { installed in
            guard !installed else { return }
            installed = true
            var descriptors: [Int32] = [-1, -1]
            guard pipe(&descriptors) == 0 else { return }
            for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
            signalPipe = (descriptors[0], descriptors[1])
            let thread = Thread {
                var number: UInt8 = 0
                while true {
                    let count = read(signalPipe.read, &number, 1)
                    if count == 1 {
                        // The first Ctrl-C goes to whoever asked for it, once; any other signal ends the process.
                        if Int32(number) == SIGINT, let handler = interruptHandler.withLock({ handler in
                            defer { handler = nil }
                            return handler
                        }) {
                            handler()
                            continue
                        }
                        break
                    }
                    if count < 0 && errno == EINTR { continue }
                    return
                }
                let all = registered.withLock { registered -> [String] in
                    defer { registered = [:] }
                    return registered.values.flatMap { $0 }
                }
                for path in all { remove(path) }
                signal(Int32(number), SIG_DFL)
                kill(getpid(), Int32(number))
            }
            thread.name = "bleota-signals"
            thread.start()
            for number in [SIGINT, SIGTERM, SIGHUP] {
                // A signal ignored by whoever started the process (nohup, a shell's
                // background job) stays ignored, as programs are expected to leave it.
                var previous = sigaction()
                sigaction(number, nil, &previous)
                if let handler = previous.__sigaction_handler.sa_handler, unsafeBitCast(handler, to: Int.self) == 1 { continue } // SIG_IGN
                var action = sigaction()
                action.__sigaction_handler.sa_handler = { number in
                    var byte = UInt8(truncatingIfNeeded: number)
                    _ = write(TemporaryPaths.signalPipe.write, &byte, 1)
                }
                action.sa_flags = SA_RESTART
                sigemptyset(&action.sa_mask)
                sigaction(number, &action, nil)
            }
        }
    }
}
