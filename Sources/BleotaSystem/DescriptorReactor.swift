import BleotaLink
import CEpoll
import Foundation
import Glibc
import Synchronization

/// Why a ``DescriptorReactor/wait(_:writable:)`` ended without the descriptor
/// becoming ready.
public enum DescriptorWaitError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The waiting task was cancelled.
    case cancelled
    /// ``DescriptorReactor/forget(_:)`` was called for the descriptor: its owner
    /// is closing it, so there is nothing left to wait for.
    case forgotten
    /// epoll refused the descriptor (`epoll_ctl`'s errno): `EPERM` for a regular
    /// file, which is always ready, `EBADF` for a number that is not open.
    case refused(errno: Int32)

    public var description: String {
        switch self {
        case .cancelled: return "the wait was cancelled"
        case .forgotten: return "the descriptor was closed while a task waited on it"
        case .refused(let code): return "epoll cannot wait on the descriptor: \(String(cString: strerror(code))) (errno \(code))"
        }
    }
}

/// The one event loop of bleota's real I/O: a single thread in `epoll_wait` for
/// every descriptor the process waits on — UDP sockets, serial ports and
/// pseudo-terminals (``UDPLink``, ``SerialLineLink``, ``UDPServerSocket``), and
/// BleotaBlueZ's L2CAP and HCI sockets.
///
/// A task that finds a non-blocking descriptor not ready (`EAGAIN`) calls
/// ``wait(_:writable:)``, which parks its continuation here without holding a
/// thread; the loop resumes it when epoll reports the descriptor ready. No
/// thread per connection, no polling loop, and cancellation is structured: a
/// cancelled task leaves at once.
///
/// The rules for a descriptor's owner:
/// - The descriptor is non-blocking, and the owner does every read and write
///   itself, in its own task. The reactor never touches the data; it only says
///   "try again now".
/// - A wake is a hint, not a promise: the owner retries its call and waits again
///   on `EAGAIN`. epoll also reports error and hang-up conditions as ready (so the
///   next call can report them); a descriptor that stays hung up is therefore
///   always "ready", and an owner must not simply wait on it again after a call
///   that made no progress (``SerialLineLink`` shows what to do instead).
/// - Before closing a descriptor its owner calls ``forget(_:)``: tasks still
///   waiting on it get ``DescriptorWaitError/forgotten`` and the registration is
///   dropped, so the next descriptor that gets the same number starts clean.
///
/// Several tasks may wait on one descriptor, in either direction; each wait is
/// one-shot (`EPOLLONESHOT`) and every task waiting for what became ready is woken.
public final class DescriptorReactor: Sendable {
    /// The process's reactor. One is enough: the loop only dispatches readiness,
    /// so it is never the bottleneck, and each reactor owns a thread for good.
    public static let shared = DescriptorReactor()

    private struct Waiter {
        var id: UInt64
        var writable: Bool
        var continuation: CheckedContinuation<DescriptorWaitError?, Never>
    }

    private struct State {
        /// Who waits on which descriptor, in arrival order.
        var waiters: [Int32: [Waiter]] = [:]
        /// Descriptors in epoll's interest list (armed or spent one-shot).
        var registered: Set<Int32> = []
        var nextID: UInt64 = 0
        var started = false
    }

    private let epoll: Int32
    /// `epoll_create1`'s errno if it failed, so every wait can say why it cannot work.
    private let creationError: Int32
    private let state = Mutex(State())

    init() {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        creationError = epoll < 0 ? errno : 0
    }

    /// Suspends until `fd` is readable (or, with `writable`, writable), or has an
    /// error or hang-up condition for the next call to report.
    ///
    /// Throws ``DescriptorWaitError/cancelled`` when the task is cancelled (also if
    /// it already was), ``DescriptorWaitError/forgotten`` when ``forget(_:)`` is
    /// called for `fd` meanwhile, and ``DescriptorWaitError/refused(errno:)`` for a
    /// descriptor epoll cannot watch.
    public func wait(_ fd: Int32, writable: Bool) async throws(DescriptorWaitError) {
        try await wait(fd, writable: writable, unless: { false })
    }

    /// ``wait(_:writable:)``, except that the wait ends at once with
    /// ``DescriptorWaitError/forgotten`` if `abandoned` returns true when the task
    /// is about to park.
    ///
    /// `abandoned` runs under the reactor's lock, so an owner whose `close`
    /// first marks itself closed and then calls ``forget(_:)`` can never leave a
    /// task parked on a descriptor it has closed: either the task parked before
    /// `forget` (which wakes it) or it sees the mark. `abandoned` must not call
    /// back into the reactor.
    func wait(_ fd: Int32, writable: Bool, unless abandoned: () -> Bool) async throws(DescriptorWaitError) {
        guard creationError == 0 else { throw .refused(errno: creationError) }
        startIfNeeded()
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        let outcome: DescriptorWaitError? = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<DescriptorWaitError?, Never>) in
                let failures = state.withLock { state -> [(CheckedContinuation<DescriptorWaitError?, Never>, DescriptorWaitError)] in
                    if Task.isCancelled { return [(continuation, .cancelled)] }
                    if abandoned() { return [(continuation, .forgotten)] }
                    state.waiters[fd, default: []].append(Waiter(id: id, writable: writable, continuation: continuation))
                    return arm(fd, &state)
                }
                for (waiter, error) in failures { waiter.resume(returning: error) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard var list = state.waiters[fd], let index = list.firstIndex(where: { $0.id == id }) else { return nil }
                let waiter = list.remove(at: index)
                state.waiters[fd] = list.isEmpty ? nil : list
                return waiter
            }
            waiter?.continuation.resume(returning: .cancelled)
        }
        if let outcome { throw outcome }
    }

    /// Drops `fd`: tasks waiting on it end with ``DescriptorWaitError/forgotten``
    /// and epoll stops watching it. Call it before closing the descriptor, never
    /// after (by then the number may belong to someone else's descriptor).
    public func forget(_ fd: Int32) {
        let waiters = state.withLock { state -> [Waiter] in
            if state.registered.remove(fd) != nil { _ = epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nil) }
            return state.waiters.removeValue(forKey: fd) ?? []
        }
        for waiter in waiters { waiter.continuation.resume(returning: .forgotten) }
    }

    /// How many tasks are parked on `fd`, for tests that must know a wait has begun.
    package func waitingTasks(on fd: Int32) -> Int {
        state.withLock { $0.waiters[fd]?.count ?? 0 }
    }

    /// Registers `fd` for what its waiters want (one-shot). If epoll refuses, its
    /// waiters are removed and returned with the error, to be resumed outside the lock.
    private func arm(_ fd: Int32, _ state: inout State) -> [(CheckedContinuation<DescriptorWaitError?, Never>, DescriptorWaitError)] {
        let waiters = state.waiters[fd] ?? []
        var mask: UInt32 = 0
        if waiters.contains(where: { !$0.writable }) { mask |= EPOLLIN.rawValue }
        if waiters.contains(where: \.writable) { mask |= EPOLLOUT.rawValue }
        guard mask != 0 else { return [] }
        var event = epoll_event(events: mask | EPOLLONESHOT.rawValue, data: epoll_data_t(fd: fd))
        if state.registered.contains(fd), epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event) == 0 { return [] }
        // Not registered yet, or closed without forget(_:) (the kernel dropped it then).
        if epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) == 0 {
            state.registered.insert(fd)
            return []
        }
        let code = errno
        if code == EEXIST, epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event) == 0 {
            state.registered.insert(fd)
            return []
        }
        state.registered.remove(fd)
        state.waiters[fd] = nil
        return waiters.map { ($0.continuation, .refused(errno: code)) }
    }

    private func startIfNeeded() {
        let start = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started
        }
        guard start else { return }
        let thread = Thread { [self] in run() }
        thread.name = "bleota-reactor"
        thread.start()
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        while true {
            let count = epoll_wait(epoll, &events, Int32(events.count), -1)
            if count < 0 {
                if errno == EINTR { continue }
                fatalError("epoll_wait failed: \(String(cString: strerror(errno)))")
            }
            for index in 0..<Int(count) {
                let fd = events[index].data.fd
                let flags = events[index].events
                let resumptions = state.withLock { state in wake(fd, flags: flags, &state) }
                for (waiter, outcome) in resumptions { waiter.resume(returning: outcome) }
            }
        }
    }

    /// Takes the waiters `flags` satisfies and re-arms `fd` for the rest.
    private func wake(
        _ fd: Int32, flags: UInt32, _ state: inout State
    )
        -> [(CheckedContinuation<DescriptorWaitError?, Never>, DescriptorWaitError?)]
    {
        guard let waiters = state.waiters[fd] else { return [] }
        let condition = flags & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0
        let readable = condition || flags & EPOLLIN.rawValue != 0
        let writable = condition || flags & EPOLLOUT.rawValue != 0
        var ready: [(CheckedContinuation<DescriptorWaitError?, Never>, DescriptorWaitError?)] = []
        var rest: [Waiter] = []
        for waiter in waiters {
            if waiter.writable ? writable : readable { ready.append((waiter.continuation, nil)) } else { rest.append(waiter) }
        }
        state.waiters[fd] = rest.isEmpty ? nil : rest
        if !rest.isEmpty {
            ready += arm(fd, &state).map { ($0.0, Optional($0.1)) }
        }
        return ready
    }
}
