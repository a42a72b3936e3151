import BleotaLink
import Glibc
import Testing

@testable import BleotaSystem

/// A connected pair of non-blocking AF_UNIX datagram sockets, closed at the end.
func withSocketPair<T>(_ body: (Int32, Int32) async throws -> T) async throws -> T {
    var fds: [Int32] = [-1, -1]
    let made = socketpair(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
    try #require(made == 0)
    defer {
        for fd in fds {
            DescriptorReactor.shared.forget(fd)
            close(fd)
        }
    }
    return try await body(fds[0], fds[1])
}

/// Suspends until `count` tasks are parked on `fd` in the shared reactor (at most 10 s, then the test fails).
func waitUntilParked(_ fd: Int32, count: Int = 1, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    // A liveness bound, not a timing assertion: while other suites run subprocesses the
    // cooperative pool (two threads here) can be busy for seconds before the task gets to park.
    // One reading decides: reading again for the verdict raced a wake-up in between (a task woken
    // by an event it then finds spurious is off the list until it parks again).
    let clock = SystemClock()
    var waiting = DescriptorReactor.shared.waitingTasks(on: fd)
    while waiting < count, clock.now < .seconds(60) {
        try await Task.sleep(for: .milliseconds(1))
        waiting = DescriptorReactor.shared.waitingTasks(on: fd)
    }
    try #require(waiting == count, sourceLocation: sourceLocation)
}

@Suite struct DescriptorReactorTests {
    @Test func aWaitingTaskWakesWhenDataArrivesAndThenReadsIt() async throws {
        let received = try await withSocketPair { left, right in
            let reader = Task { () throws -> [UInt8] in
                var buffer = [UInt8](repeating: 0, count: 16)
                while true {
                    let count = buffer.withUnsafeMutableBytes { recv(left, $0.baseAddress, $0.count, 0) }
                    if count >= 0 { return Array(buffer[..<count]) }
                    #expect(errno == EAGAIN)
                    try await DescriptorReactor.shared.wait(left, writable: false)
                }
            }
            try await waitUntilParked(left)
            let sent = [UInt8]([1, 2, 3]).withUnsafeBytes { send(right, $0.baseAddress, $0.count, 0) }
            #expect(sent == 3)
            return try await value(of: reader)
        }
        #expect(received == [1, 2, 3])
    }

    @Test func aWritableDescriptorIsReadyAtOnce() async throws {
        try await withSocketPair { left, _ in
            try await DescriptorReactor.shared.wait(left, writable: true)
            #expect(DescriptorReactor.shared.waitingTasks(on: left) == 0)
        }
    }

    @Test func cancellingTheWaitingTaskEndsTheWaitAndLeavesNoWaiter() async throws {
        let outcome = try await withSocketPair { left, _ in
            let waiter = Task { () -> DescriptorWaitError? in
                do throws(DescriptorWaitError) {
                    try await DescriptorReactor.shared.wait(left, writable: false)
                    return nil
                } catch { return error }
            }
            try await waitUntilParked(left)
            waiter.cancel()
            let outcome = await value(of: waiter)
            #expect(DescriptorReactor.shared.waitingTasks(on: left) == 0)
            return outcome
        }
        #expect(outcome == .cancelled)
    }

    @Test func aTaskCancelledBeforeItWaitsDoesNotPark() async throws {
        let outcome = try await withSocketPair { left, _ in
            let waiter = Task { () -> DescriptorWaitError? in
                withUnsafeCurrentTask { $0?.cancel() }
                do throws(DescriptorWaitError) {
                    try await DescriptorReactor.shared.wait(left, writable: false)
                    return nil
                } catch { return error }
            }
            return await value(of: waiter)
        }
        #expect(outcome == .cancelled)
    }

    @Test func forgetEndsEveryWaitOnTheDescriptor() async throws {
        let outcomes = try await withSocketPair { left, _ in
            let waiters = (0..<2).map { _ in
                Task { () -> DescriptorWaitError? in
                    do throws(DescriptorWaitError) {
                        try await DescriptorReactor.shared.wait(left, writable: false)
                        return nil
                    } catch { return error }
                }
            }
            try await waitUntilParked(left, count: 2)
            DescriptorReactor.shared.forget(left)
            return [await value(of: waiters[0]), await value(of: waiters[1])]
        }
        #expect(outcomes == [.forgotten, .forgotten])
    }

    @Test func twoTasksWaitingForInputAreBothWoken() async throws {
        let wakes = try await withSocketPair { left, right in
            try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        try await DescriptorReactor.shared.wait(left, writable: false)
                        return true
                    }
                }
                try await waitUntilParked(left, count: 2)
                _ = [UInt8]([9]).withUnsafeBytes { send(right, $0.baseAddress, $0.count, 0) }
                var wakes = 0
                for try await woke in group where woke { wakes += 1 }
                return wakes
            }
        }
        #expect(wakes == 2)
    }

    @Test func aRegularFileIsRefusedWithEpollsReason() async throws {
        let fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        await #expect(throws: DescriptorWaitError.refused(errno: EPERM)) {
            try await DescriptorReactor.shared.wait(fd, writable: false)
        }
        #expect(DescriptorReactor.shared.waitingTasks(on: fd) == 0)
    }
}
