import BleotaLink
import Glibc
import Synchronization
import Testing

@testable import BleotaSystem

/// What happened to a ``LinkDescriptor``, in order.
final class EventLog: Sendable {
    private let events = Mutex<[String]>([])
    func append(_ event: String) { events.withLock { $0.append(event) } }
    var all: [String] { events.withLock { $0 } }
}

@Suite struct LinkDescriptorTests {
    /// A descriptor whose closes are logged instead of made (the test's socket pair closes for real).
    static func logged(_ fd: Int32, companions: [Int32] = [], ownsDescriptor: Bool = true, log: EventLog) -> LinkDescriptor {
        LinkDescriptor(fd: fd, companions: companions, ownsDescriptor: ownsDescriptor) { log.append("closed \($0)") }
    }

    @Test func closingTwiceClosesEachNumberOnce() async throws {
        let log = EventLog()
        try await withSocketPair { left, right in
            let descriptor = Self.logged(left, companions: [right], log: log)
            descriptor.close()
            descriptor.close()
            #expect(log.all == ["closed \(left)", "closed \(right)"])
        }
    }

    @Test func aBorrowedDescriptorIsLeftOpenButItsCompanionsAreClosed() async throws {
        let log = EventLog()
        try await withSocketPair { left, right in
            Self.logged(left, companions: [right], ownsDescriptor: false, log: log).close()
            #expect(log.all == ["closed \(right)"])
        }
    }

    @Test func theNumberIsClosedOnlyAfterTheTaskUsingItHasLeft() async throws {
        let log = EventLog()
        let (outcome, fd) = try await withSocketPair { left, _ in
            let descriptor = Self.logged(left, log: log)
            let user = Task { () -> LinkError? in
                do throws(LinkError) {
                    try await descriptor.use(ifClosed: .disconnected("closed before use")) { _ throws(LinkError) in
                        defer { log.append("left") }
                        try await descriptor.wait(writable: false, closed: "closed while waiting")
                    }
                    return nil
                } catch {
                    return error
                }
            }
            try await waitUntilParked(left)
            descriptor.close()
            return (await value(of: user), left)
        }
        #expect(outcome == .disconnected("closed while waiting"))
        #expect(log.all == ["left", "closed \(fd)"])
    }

    @Test func aUseAfterCloseFailsWithoutTouchingTheNumber() async throws {
        let log = EventLog()
        try await withSocketPair { left, _ in
            let descriptor = Self.logged(left, log: log)
            descriptor.close()
            await #expect(throws: LinkError.disconnected("closed before use")) {
                try await descriptor.use(ifClosed: .disconnected("closed before use")) { _ throws(LinkError) in
                    log.append("ran")
                }
            }
            #expect(descriptor.useNow { _ in log.append("ran now") } == nil)
            #expect(log.all == ["closed \(left)"])
        }
    }

    @Test func aWaitThatBeginsAfterCloseEndsAtOnce() async throws {
        let log = EventLog()
        let outcome = try await withSocketPair { left, _ in
            let descriptor = Self.logged(left, log: log)
            // Enter first, close, then wait: the reactor must not park the task on a closed link.
            return try await finishing {
                do throws(LinkError) {
                    try await descriptor.use(ifClosed: .disconnected("closed before use")) { _ throws(LinkError) in
                        descriptor.close()
                        #expect(log.all.isEmpty)
                        try await descriptor.wait(writable: false, closed: "closed while waiting")
                    }
                    return nil as LinkError?
                } catch {
                    return error
                }
            }
        }
        #expect(outcome == .disconnected("closed while waiting"))
        #expect(log.all.count == 1)
    }
}
