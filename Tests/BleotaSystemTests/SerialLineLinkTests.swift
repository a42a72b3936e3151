import BleotaLink
import Glibc
import Synchronization
import Testing

@testable import BleotaSystem

/// A pseudo-terminal whose master is a ``SerialLineLink``, and the client's side:
/// the slave, opened with open(2) as smpmgr or a terminal program would.
struct PseudoTerminalFixture {
    let terminal: PseudoTerminal
    let link: SerialLineLink

    init() throws {
        terminal = try PseudoTerminal.open()
        link = SerialLineLink(fd: terminal.master, description: terminal.path, ownsDescriptor: true, isPseudoTerminalMaster: true)
    }

    /// Opens the slave (non-blocking, so the test's own reads never block a thread).
    func openSlave() throws -> Int32 {
        let fd = open(terminal.path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)
        try #require(fd >= 0, "open \(terminal.path): \(String(cString: strerror(errno)))")
        return fd
    }

    func write(_ text: String, to slave: Int32) {
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(slave, $0.baseAddress, $0.count) }
        #expect(written == bytes.count)
    }

    func closeSlave(_ slave: Int32) {
        DescriptorReactor.shared.forget(slave)
        close(slave)
    }
}

@Suite struct SerialLineLinkTests {
    @Test func linesSplitAcrossWritesAreReassembled() async throws {
        let pty = try PseudoTerminalFixture()
        let slave = try pty.openSlave()
        pty.write("hel", to: slave)
        let first = Task { try await pty.link.receive() }
        // The receive has read "hel" and is waiting for the rest of the line.
        try await waitUntilParked(pty.terminal.master)
        pty.write("lo\nwor", to: slave)
        let hello = try await value(of: first)
        let second = Task { try await pty.link.receive() }
        try await waitUntilParked(pty.terminal.master)
        pty.write("ld\n\nlast\n", to: slave)
        let world = try await value(of: second)
        let empty = try await pty.link.receive()
        let last = try await pty.link.receive()
        pty.closeSlave(slave)
        await pty.link.close()
        #expect(String(decoding: hello, as: UTF8.self) == "hello")
        #expect(String(decoding: world, as: UTF8.self) == "world")
        #expect(empty == [])
        #expect(String(decoding: last, as: UTF8.self) == "last")
    }

    @Test func sentBytesReachTheSlaveUnchanged() async throws {
        let pty = try PseudoTerminalFixture()
        let slave = try pty.openSlave()
        // Raw mode: no newline translation, no echo.
        try await pty.link.send(Array("ping\r\n\u{3}".utf8))
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(slave, $0.baseAddress, $0.count) }
        pty.closeSlave(slave)
        await pty.link.close()
        #expect(Array(buffer[..<max(count, 0)]) == Array("ping\r\n\u{3}".utf8))
    }

    @Test func aWriteThatFillsTheBufferWaitsForTheReaderInsteadOfFailing() async throws {
        let pty = try PseudoTerminalFixture()
        let slave = try pty.openSlave()
        let payload = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 % 251) }
        let ended = Mutex<String?>(nil)
        let sender = Task {
            do { try await pty.link.send(payload) } catch {
                ended.withLock { $0 = "\(error)" }
                throw error
            }
            ended.withLock { $0 = "sent every byte" }
        }
        // The pseudo-terminal holds a few KiB: the send must now be waiting for writability.
        // Real time: a real pseudo-terminal and the kernel's epoll are what is waited for (a
        // liveness bound of 60 s, as waitUntilParked's).
        let clock = SystemClock()
        while DescriptorReactor.shared.waitingTasks(on: pty.terminal.master) < 1, ended.withLock({ $0 }) == nil, clock.now < .seconds(60) {
            try await Task.sleep(for: .milliseconds(1))
        }
        #expect(ended.withLock { $0 } == nil, "the send ended before the slave read anything")
        try await waitUntilParked(pty.terminal.master)
        let received = try await finishing {
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 8192)
            while received.count < payload.count {
                let count = buffer.withUnsafeMutableBytes { read(slave, $0.baseAddress, $0.count) }
                if count > 0 {
                    received += buffer[..<count]
                    continue
                }
                #expect(errno == EAGAIN)
                try await DescriptorReactor.shared.wait(slave, writable: false)
            }
            return received
        }
        try await value(of: sender)
        pty.closeSlave(slave)
        await pty.link.close()
        #expect(received.count == payload.count)
        #expect(received == payload)
    }

    @Test func aClientThatClosesTheSlaveIsNotTheEndOfInput() async throws {
        let pty = try PseudoTerminalFixture()
        let watch = try #require(pty.link.slaveOpens, "inotify should watch the slave's opens")
        var slave = try pty.openSlave()
        pty.write("one\n", to: slave)
        pty.closeSlave(slave)
        let one = try await finishing { try await pty.link.receive() }
        // Nobody has the slave open: the next receive waits for an open, not on the hung-up master.
        let next = Task { try await pty.link.receive() }
        try await waitUntilParked(watch)
        #expect(DescriptorReactor.shared.waitingTasks(on: pty.terminal.master) == 0)
        slave = try pty.openSlave()
        pty.write("two\n", to: slave)
        let two = try await value(of: next)
        // Open, write and close again before the link looks.
        pty.closeSlave(slave)
        slave = try pty.openSlave()
        pty.write("three\n", to: slave)
        pty.closeSlave(slave)
        let three = try await finishing { try await pty.link.receive() }
        await pty.link.close()
        #expect(String(decoding: one, as: UTF8.self) == "one")
        #expect(String(decoding: two, as: UTF8.self) == "two")
        #expect(String(decoding: three, as: UTF8.self) == "three")
    }

    @Test func closingEndsAReceiveWaitingForAClient() async throws {
        let pty = try PseudoTerminalFixture()
        let watch = try #require(pty.link.slaveOpens)
        let slave = try pty.openSlave()
        pty.closeSlave(slave)
        let receiver = Task { () -> LinkError? in
            do throws(LinkError) {
                _ = try await pty.link.receive()
                return nil
            } catch { return error }
        }
        try await waitUntilParked(watch)
        await pty.link.close()
        await pty.link.close()
        let outcome = await value(of: receiver)
        #expect(outcome == .disconnected("the serial port closed"))
        await #expect(throws: LinkError.disconnected("the serial link is closed")) { try await pty.link.send([1]) }
    }

    @Test func aPathThatIsNotThereIsUnreachableWithAHint() {
        #expect(throws: LinkError.unreachable("cannot open /dev/bleota-no-such-port: No such file or directory (is the device plugged in?)")) {
            _ = try SerialLineLink(path: "/dev/bleota-no-such-port")
        }
    }
}
