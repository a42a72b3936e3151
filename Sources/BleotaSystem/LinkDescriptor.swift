import BleotaLink
import Glibc
import Synchronization

/// The non-blocking descriptor of one link, shared by the link's tasks, with
/// the rule that makes closing it safe while they run.
///
/// A file descriptor is a number the kernel hands out again as soon as it is
/// closed, so a task that reads "its" descriptor after another task closed it
/// may read an unrelated file or socket that was opened since. Here every system
/// call on the descriptor, and every reactor wait for it, happens inside
/// ``use(ifClosed:_:)``, which counts the task in. ``close()`` marks the
/// descriptor closed (a later `use` fails at once), ends the reactor waits of the
/// tasks inside (``DescriptorReactor/forget(_:)``), and the number is closed by
/// whichever comes last — `close()` or the last task leaving `use` — exactly once.
final class LinkDescriptor: Sendable {
    let fd: Int32
    /// Descriptors that live and die with `fd` (a pseudo-terminal's open watch):
    /// waited on inside `use` too, forgotten and always closed with it.
    let companions: [Int32]
    let reactor: DescriptorReactor
    private let closesDescriptor: Bool
    private let release: @Sendable (Int32) -> Void

    private struct State {
        var closed = false
        /// Set once `close()` has forgotten the descriptors; nothing is closed before.
        var forgotten = false
        var users = 0
        var released = false
    }

    private let state = Mutex(State())

    /// - Parameters:
    ///   - ownsDescriptor: false for a descriptor the caller closes itself; it is
    ///     still forgotten by the reactor on ``close()``.
    ///   - release: closes one number; replaceable so tests can watch it happen.
    init(
        fd: Int32, companions: [Int32] = [], ownsDescriptor: Bool = true, reactor: DescriptorReactor = .shared,
        release: @escaping @Sendable (Int32) -> Void = { _ = Glibc.close($0) }
    ) {
        self.fd = fd
        self.companions = companions
        self.closesDescriptor = ownsDescriptor
        self.reactor = reactor
        self.release = release
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    /// Runs `body` with the descriptor held open; throws `closedError` without
    /// running it if the link is closed already.
    func use<T>(
        ifClosed closedError: @autoclosure () -> LinkError,
        _ body: (Int32) async throws(LinkError) -> T
    ) async throws(LinkError) -> T {
        guard enter() else { throw closedError() }
        defer { leave() }
        return try await body(fd)
    }

    /// ``use(ifClosed:_:)`` for a call that never waits; nil if the link is closed.
    func useNow<T>(_ body: (Int32) -> T) -> T? {
        guard enter() else { return nil }
        defer { leave() }
        return body(fd)
    }

    /// Waits on the reactor for `descriptor` (`fd` or a companion); only inside
    /// `use`. Once the link is closed — even if the close came just before the wait
    /// began — it ends with ``/BleotaLink/LinkError/disconnected(_:)`` saying `closed`; a
    /// cancelled task gets ``/BleotaLink/LinkError/cancelled``.
    func wait(_ descriptor: Int32? = nil, writable: Bool, closed: String) async throws(LinkError) {
        do {
            try await reactor.wait(descriptor ?? fd, writable: writable, unless: { self.isClosed })
        } catch {
            switch error {
            case .cancelled: throw .cancelled
            case .forgotten: throw .disconnected(closed)
            case .refused: throw .system(error.description)
            }
        }
    }

    /// Closes the link's descriptor: at once if no task is using it, else when the
    /// last one leaves (waiting tasks are woken to do so). Later calls do nothing.
    func close() {
        let first = state.withLock { state -> Bool in
            defer { state.closed = true }
            return !state.closed
        }
        guard first else { return }
        // Forget while the numbers are surely still ours: nothing closes them before `forgotten`.
        reactor.forget(fd)
        for companion in companions { reactor.forget(companion) }
        let releaseNow = state.withLock { state -> Bool in
            state.forgotten = true
            return Self.takeRelease(&state)
        }
        if releaseNow { releaseAll() }
    }

    private func enter() -> Bool {
        state.withLock { state in
            guard !state.closed else { return false }
            state.users += 1
            return true
        }
    }

    private func leave() {
        let releaseNow = state.withLock { state -> Bool in
            state.users -= 1
            return Self.takeRelease(&state)
        }
        if releaseNow { releaseAll() }
    }

    /// True exactly once: when the link is closed, forgotten and unused.
    private static func takeRelease(_ state: inout State) -> Bool {
        guard state.closed, state.forgotten, state.users == 0, !state.released else { return false }
        state.released = true
        return true
    }

    private func releaseAll() {
        if closesDescriptor { release(fd) }
        for companion in companions { release(companion) }
    }
}
