import BleotaLink
import Glibc
import Synchronization

/// A serial port (or a pseudo-terminal) in raw mode as a byte stream cut into
/// lines: each ``receive()`` is one line without its newline, each
/// ``send(_:)`` writes bytes as they are. SMP's console framing runs on top.
///
/// The descriptor is non-blocking: the task awaiting ``receive()`` reads when
/// the ``DescriptorReactor`` says input is there, and a write that finds the
/// output buffer full waits for writability the same way. No reader thread, no
/// polling. ``receive()`` is meant for one task at a time (lines would
/// interleave otherwise).
///
/// **Pseudo-terminal masters** (`bleota sim serve --serial`): a client opens the
/// slave, talks, closes it, and another may open it later. While nobody has the
/// slave open the master reads `EIO` and epoll reports it hung up — ready, at
/// once and forever — and Linux tells the master nothing when the slave is opened
/// again. So a hung-up master is "peer not there yet", not the end of input, and
/// the link waits for the next open of the slave instead: it watches the slave's
/// path with inotify (`IN_OPEN`) and waits for that watch on the reactor. Only if
/// the watch cannot be set up (inotify unavailable or out of watches) does it fall
/// back to looking again every 50 ms of wall-clock time — while hung up
/// only, never while a client is connected.
public final class SerialLineLink: DelimitedByteStream {
    public let parameters: LinkParameters
    let fd: Int32
    let ownsDescriptor: Bool
    let isPseudoTerminalMaster: Bool
    /// The inotify descriptor watching the slave's opens (pseudo-terminal masters only).
    let slaveOpens: Int32?
    let descriptor: LinkDescriptor
    /// Bytes received after the last complete line.
    private let pending = Mutex<[UInt8]>([])

    /// How long a hung-up pseudo-terminal master waits before looking again when
    /// no inotify watch could be set up: short, since a client that has just opened
    /// the slave waits for its first answer this long at most.
    static let hangUpBackOff = Duration.milliseconds(50)

    /// Opens `path` at `baud` in raw mode (8N1, no flow control).
    public convenience init(path: String, baud: Int = 115_200) throws(LinkError) {
        let fd = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            let hint = code == EACCES ? " (add yourself to the dialout group)" : code == ENOENT ? " (is the device plugged in?)" : ""
            throw .unreachable("cannot open \(path): \(String(cString: strerror(code)))\(hint)")
        }
        do {
            try Self.makeRaw(fd, baud: baud)
        } catch {
            Glibc.close(fd)
            throw error
        }
        self.init(fd: fd, description: "serial://\(path)", ownsDescriptor: true)
    }

    /// Wraps an open descriptor, which this link makes non-blocking (a flag shared
    /// with every copy of the descriptor). `isPseudoTerminalMaster`: the far end
    /// comes and goes (clients open and close the slave), which is not the end of input.
    public init(fd: Int32, description: String, ownsDescriptor: Bool, isPseudoTerminalMaster: Bool = false) {
        self.fd = fd
        self.ownsDescriptor = ownsDescriptor
        self.isPseudoTerminalMaster = isPseudoTerminalMaster
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0, flags & O_NONBLOCK == 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        slaveOpens = isPseudoTerminalMaster ? Self.watchSlaveOpens(master: fd) : nil
        descriptor = LinkDescriptor(fd: fd, companions: slaveOpens.map { [$0] } ?? [], ownsDescriptor: ownsDescriptor)
        parameters = LinkParameters(maximumPayload: 65_536, description: description)
    }

    static func makeRaw(_ fd: Int32, baud: Int) throws(LinkError) {
        var settings = termios()
        guard tcgetattr(fd, &settings) == 0 else { throw .system("tcgetattr: \(String(cString: strerror(errno)))") }
        cfmakeraw(&settings)
        let speeds: [Int: speed_t] = [
            9600: speed_t(B9600), 19200: speed_t(B19200), 38400: speed_t(B38400), 57600: speed_t(B57600),
            115_200: speed_t(B115200), 230_400: speed_t(B230400), 460_800: speed_t(B460800),
            921_600: speed_t(B921600), 1_000_000: speed_t(B1000000),
        ]
        guard let speed = speeds[baud] else {
            throw .system("baud rate \(baud) is not supported: use one of \(speeds.keys.sorted().map(String.init).joined(separator: ", "))")
        }
        cfsetispeed(&settings, speed)
        cfsetospeed(&settings, speed)
        guard tcsetattr(fd, TCSANOW, &settings) == 0 else { throw .system("tcsetattr: \(String(cString: strerror(errno)))") }
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        let closed = "the serial link is closed"
        try await descriptor.use(ifClosed: .disconnected(closed)) { fd throws(LinkError) in
            var offset = 0
            while offset < packet.count {
                let written = packet[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if written > 0 {
                    offset += written
                    continue
                }
                let code = written < 0 ? errno : EAGAIN
                switch code {
                case EINTR: continue
                case EAGAIN:
                    // A hung-up master stays "writable" to epoll: waiting would spin. Nobody is
                    // there to read the rest, so the write fails like a dropped line would.
                    if isPseudoTerminalMaster, Self.isHungUp(fd) {
                        throw .disconnected("serial write: nobody has \(parameters.description) open")
                    }
                    try await descriptor.wait(writable: true, closed: closed)
                default: throw .disconnected("serial write: \(String(cString: strerror(code)))")
                }
            }
        }
    }

    /// The next complete line (without "\n").
    public func receive() async throws(LinkError) -> [UInt8] { try await receive(until: 0x0A) }

    /// The bytes up to the next `delimiter` (without it): a line for a console,
    /// a frame for SLIP (whose frames end with 0xC0).
    public func receive(until delimiter: UInt8) async throws(LinkError) -> [UInt8] {
        while true {
            if let line = pending.withLock({ buffer -> [UInt8]? in
                guard let end = buffer.firstIndex(of: delimiter) else { return nil }
                let line = Array(buffer[..<end])
                buffer.removeSubrange(...end)
                return line
            }) {
                return line
            }
            let chunk = try await readChunk()
            pending.withLock { $0 += chunk }
        }
    }

    /// Closes the port (once; later calls do nothing). A task waiting in
    /// ``receive()`` or ``send(_:)`` gets ``/BleotaLink/LinkError/disconnected(_:)`` at once.
    public func close() async { descriptor.close() }

    /// Reads what is there, waiting on the reactor until something is.
    private func readChunk() async throws(LinkError) -> [UInt8] {
        let closed = "the serial port closed"
        return try await descriptor.use(ifClosed: .disconnected(closed)) { fd throws(LinkError) in
            var buffer = [UInt8](repeating: 0, count: 4096)
            /// A hung-up master's watch was drained since the last failed read.
            var drained = false
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count > 0 { return Array(buffer[..<count]) }
                let code = count < 0 ? errno : 0
                switch code {
                case EINTR: continue
                case EAGAIN: try await descriptor.wait(writable: false, closed: closed)
                case EIO where isPseudoTerminalMaster, 0 where isPseudoTerminalMaster:
                    // Nobody has the slave open. Forget the opens seen so far and read once more
                    // (a client that opened in between shows there), then wait for the next open.
                    if !drained, let slaveOpens {
                        Self.drain(slaveOpens)
                        drained = true
                        continue
                    }
                    drained = false
                    try await waitForSlaveOpen(closed: closed)
                case 0:
                    // End of file on a tty: a hang-up (modem lines, a USB adapter unplugged).
                    if Self.isHungUp(fd) { throw .disconnected(closed) }
                    try await descriptor.wait(writable: false, closed: closed)
                default: throw .disconnected("serial read: \(String(cString: strerror(code)))")
                }
            }
        }
    }

    /// Waits until a client may have opened the slave of this hung-up master (see the type's notes).
    private func waitForSlaveOpen(closed: String) async throws(LinkError) {
        guard let slaveOpens else {
            // No watch: look again after a pause. A close() meanwhile takes effect when it ends.
            do { try await SystemClock().sleep(for: Self.hangUpBackOff) } catch { throw .cancelled }
            return
        }
        try await descriptor.wait(slaveOpens, writable: false, closed: closed)
    }

    /// Reads every event queued on an inotify descriptor.
    static func drain(_ watch: Int32) {
        var events = [UInt8](repeating: 0, count: 1024)
        while events.withUnsafeMutableBytes({ read(watch, $0.baseAddress, $0.count) }) > 0 {}
    }

    /// True when the descriptor reports a hang-up with no input left to read.
    static func isHungUp(_ fd: Int32) -> Bool {
        var probe = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&probe, 1, 0) > 0 else { return false }
        return probe.revents & Int16(POLLHUP) != 0 && probe.revents & Int16(POLLIN) == 0
    }

    /// An inotify descriptor that becomes readable whenever the slave of `master`
    /// is opened; nil if `master` is not a pseudo-terminal master or inotify cannot watch it.
    static func watchSlaveOpens(master: Int32) -> Int32? {
        var number: UInt32 = 0
        guard ioctl(master, 0x8004_5430 /* TIOCGPTN */, &number) == 0 else { return nil }
        let watch = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard watch >= 0 else { return nil }
        guard inotify_add_watch(watch, "/dev/pts/\(number)", UInt32(IN_OPEN)) >= 0 else {
            Glibc.close(watch)
            return nil
        }
        return watch
    }
}
