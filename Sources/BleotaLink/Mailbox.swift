import Synchronization

/// An unbounded FIFO with one waiting consumer whose wait can be cancelled
/// without losing an item.
///
/// `AsyncStream` ends for good when a waiting task is cancelled, which makes it
/// unusable with timeouts (racing `next()` against a timer); transports and the
/// engine use this instead. `take()` is meant for a single consumer task.
public final class Mailbox<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var head = 0
        var waiter: (id: UInt64, continuation: CheckedContinuation<Element?, Never>)?
        var nextWaiterID: UInt64 = 0
        var closed = false
    }

    private let state = Mutex(State())

    public init() {}

    /// Adds an item, waking the waiting consumer. Ignored after ``close()``.
    public func put(_ item: Element) {
        let waiter: CheckedContinuation<Element?, Never>? = state.withLock { state in
            guard !state.closed else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter.continuation
            }
            state.items.append(item)
            return nil
        }
        waiter?.resume(returning: item)
    }

    /// No more items will come; a waiting or later ``take()`` returns `nil` once
    /// the queued items are drained.
    public func close() {
        let waiter = state.withLock { state -> CheckedContinuation<Element?, Never>? in
            state.closed = true
            defer { state.waiter = nil }
            return state.items.count > state.head ? nil : state.waiter?.continuation
        }
        waiter?.resume(returning: nil)
    }

    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Takes an item if one is queued, without waiting.
    public func poll() -> Element? {
        state.withLock { state in Self.dequeue(&state) }
    }

    private static func dequeue(_ state: inout State) -> Element? {
        guard state.head < state.items.count else { return nil }
        let item = state.items[state.head]
        state.head += 1
        if state.head > 64 && state.head * 2 > state.items.count {
            state.items.removeFirst(state.head)
            state.head = 0
        }
        return item
    }

    /// Waits for the next item; `nil` once closed and drained. Throws
    /// `CancellationError` if the task is cancelled while waiting (no item is lost).
    public func take() async throws -> Element? {
        if let item = poll() { return item }
        // One yield before parking: a producer on another thread often has the next
        // item ready within microseconds, and parking and waking the consumer costs
        // more than the whole item does (the engine over loopback went from about 170 to 270 MB/s).
        await Task.yield()
        if let item = poll() { return item }
        let id = state.withLock { state -> UInt64 in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        let result: Element? = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Element?, Never>) in
                let immediate: Element?? = state.withLock { state in
                    if let item = Self.dequeue(&state) { return .some(item) }
                    if state.closed { return .some(nil) }
                    if Task.isCancelled { return .some(nil) }
                    state.waiter = (id, continuation)
                    return nil
                }
                if let immediate { continuation.resume(returning: immediate) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Element?, Never>? in
                guard let waiter = state.waiter, waiter.id == id else { return nil }
                state.waiter = nil
                return waiter.continuation
            }
            waiter?.resume(returning: nil)
        }
        if result == nil, Task.isCancelled, !isClosed { throw CancellationError() }
        return result
    }
}
