import BleotaLink
import Foundation
import Glibc
import Synchronization

/// The one place bleota handles process signals.
///
/// A handler installed with `sigaction` only writes the signal's number to a
/// pipe (a write is all a handler may safely do); a thread of its own reads the
/// pipe and acts, in this order:
/// 1. observers of that signal (`sim serve` prints its links' statistics on SIGUSR1);
/// 2. for SIGINT, a command that asked for the next Ctrl-C (a fleet stops starting devices,
///    a flash stops and says what the device runs);
/// 3. for SIGINT, SIGTERM and SIGHUP otherwise: the termination hooks run (temporary files
///    and links are removed, ``TemporaryPaths``), the default action is restored and the
///    signal sent again, so the process ends as it would have and its status says which signal.
///
/// Handlers are installed synchronously, before the call that needs them returns (a dispatch
/// signal source is armed asynchronously, on another thread, after the signal has been set to
/// be ignored: a signal in between was lost). A signal that whoever started the process
/// ignored (nohup, a shell's background job) stays ignored, as programs are expected to leave it.
public enum ProcessSignals {
    /// Signals that end the process once the termination hooks have run.
    public static let terminating: [Int32] = [SIGINT, SIGTERM, SIGHUP]

    /// Stops a ``observe(_:_:)`` observer.
    public final class Observation: Sendable {
        private let signal: Int32
        private let id: UInt64
        fileprivate init(signal: Int32, id: UInt64) {
            self.signal = signal
            self.id = id
        }

        /// The observer is not called again.
        public func cancel() {
            _ = ProcessSignals.state.withLock { $0.observers[signal]?.removeValue(forKey: id) }
        }
    }

    private struct State {
        var installed: Set<Int32> = []
        var observers: [Int32: [UInt64: @Sendable () -> Void]] = [:]
        var nextID: UInt64 = 0
        var interruptHandler: (@Sendable () -> Void)?
        /// What to say when a second interrupt ends the process at once.
        var endingAtOnce: (@Sendable () -> Void)?
        var terminationHooks: [@Sendable () -> Void] = []
    }

    private static let state = Mutex(State())

    /// The pipe handlers write signal numbers to. Set once, under `state`'s lock, before any
    /// handler is installed, and never changed: the handler reads it without a lock.
    private nonisolated(unsafe) static var signalPipe: (read: Int32, write: Int32) = (-1, -1)

    /// Calls `body` on the signal thread each time the process receives `signal` (which is then
    /// no longer fatal, for as long as the process lives), until the observation is cancelled.
    public static func observe(_ signal: Int32, _ body: @escaping @Sendable () -> Void) -> Observation {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            state.observers[signal, default: [:]][state.nextID] = body
            return state.nextID
        }
        install([signal])
        return Observation(signal: signal, id: id)
    }

    /// Signals a command may intercept to stop at a safe point: Ctrl-C, and SIGTERM (what
    /// `kill`, systemd and CI runners send), which deserves the same care.
    public static let interrupting: Set<Int32> = [SIGINT, SIGTERM]

    /// Makes the next SIGINT (Ctrl-C) or SIGTERM call `handler` instead of ending the process; a
    /// second one calls `endingAtOnce` (to say what is left unknown) and ends the process as usual
    /// (termination hooks first). SIGHUP still ends it at once.
    public static func interceptNextInterrupt(_ handler: @escaping @Sendable () -> Void, endingAtOnce: (@Sendable () -> Void)? = nil) {
        install(terminating)
        state.withLock {
            $0.interruptHandler = handler
            $0.endingAtOnce = endingAtOnce
        }
    }

    /// Lets SIGINT and SIGTERM end the process again.
    public static func stopInterceptingInterrupts() {
        state.withLock {
            $0.interruptHandler = nil
            $0.endingAtOnce = nil
        }
    }

    /// Runs `hook` when a signal is about to end the process (on the signal thread, once).
    public static func onTermination(_ hook: @escaping @Sendable () -> Void) {
        state.withLock { $0.terminationHooks.append(hook) }
        install(terminating)
    }

    private static func install(_ signals: [Int32]) {
        state.withLock { state in
            if state.installed.isEmpty {
                var descriptors: [Int32] = [-1, -1]
                guard pipe(&descriptors) == 0 else { return }
                for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
                signalPipe = (descriptors[0], descriptors[1])
                let thread = Thread { deliver() }
                thread.name = "bleota-signals"
                thread.start()
            }
            for number in signals where !state.installed.contains(number) {
                state.installed.insert(number)
                var previous = sigaction()
                sigaction(number, nil, &previous)
                if terminating.contains(number), let handler = previous.__sigaction_handler.sa_handler,
                    unsafeBitCast(handler, to: Int.self) == 1
                {
                    continue
                }  // SIG_IGN: left ignored
                var action = sigaction()
                action.__sigaction_handler.sa_handler = { number in
                    var byte = UInt8(truncatingIfNeeded: number)
                    _ = write(ProcessSignals.signalPipe.write, &byte, 1)
                }
                action.sa_flags = SA_RESTART
                sigemptyset(&action.sa_mask)
                sigaction(number, &action, nil)
            }
        }
    }

    /// The signal thread: reads numbers from the pipe and acts on them.
    private static func deliver() {
        var byte: UInt8 = 0
        while true {
            let count = read(signalPipe.read, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            guard count == 1 else { return }
            let number = Int32(byte)
            let (observers, interrupt, endingAtOnce) = state.withLock {
                state -> ([@Sendable () -> Void], (@Sendable () -> Void)?, (@Sendable () -> Void)?) in
                let observers = Array((state.observers[number] ?? [:]).values)
                guard observers.isEmpty, interrupting.contains(number) else { return (observers, nil, nil) }
                if let handler = state.interruptHandler {
                    state.interruptHandler = nil
                    return ([], handler, nil)
                }
                defer { state.endingAtOnce = nil }
                return ([], nil, state.endingAtOnce)
            }
            if !observers.isEmpty {
                for observer in observers { observer() }
                continue
            }
            if let interrupt {
                interrupt()
                continue
            }
            endingAtOnce?()
            guard terminating.contains(number) else { continue }
            let hooks = state.withLock { state -> [@Sendable () -> Void] in
                defer { state.terminationHooks = [] }
                return state.terminationHooks
            }
            for hook in hooks { hook() }
            signal(number, SIG_DFL)
            kill(getpid(), number)
            return
        }
    }
}
