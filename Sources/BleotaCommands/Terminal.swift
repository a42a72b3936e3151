import Foundation
import Synchronization

/// stdout/stderr writers that know whether they are a terminal.
///
/// Progress bars redraw a line with `\r` only on a terminal; piped output gets
/// one line per step so logs and CI transcripts stay readable.
///
/// A task running inside ``capturing(_:)`` writes into a ``CapturedOutput`` instead of the
/// process's descriptors: tests run commands in-process, in parallel, each with its own output.
public struct Terminal: Sendable {
    public let descriptor: Int32
    /// Where this terminal's writes go instead of `descriptor`, while captured.
    let capture: CapturedOutput.Stream?

    public init(descriptor: Int32) {
        self.descriptor = descriptor
        capture = nil
    }

    init(capture: CapturedOutput.Stream, descriptor: Int32) {
        self.descriptor = descriptor
        self.capture = capture
    }

    @TaskLocal static var captured: CapturedOutput?

    /// The process's stdout, or the capture of the task that writes.
    public static var standardOutput: Terminal {
        captured.map { Terminal(capture: $0.standardOutput, descriptor: STDOUT_FILENO) } ?? Terminal(descriptor: STDOUT_FILENO)
    }
    /// The process's stderr, or the capture of the task that writes.
    public static var standardError: Terminal {
        captured.map { Terminal(capture: $0.standardError, descriptor: STDERR_FILENO) } ?? Terminal(descriptor: STDERR_FILENO)
    }

    /// Runs `body` with everything it writes through ``standardOutput`` and ``standardError`` kept
    /// in the returned ``CapturedOutput`` (not a terminal: no redrawn progress lines).
    public static func capturing<T: Sendable>(_ body: () async throws -> T) async rethrows -> (T, CapturedOutput) {
        let output = CapturedOutput()
        let value = try await $captured.withValue(output) { try await body() }
        return (value, output)
    }

    public var isInteractive: Bool { capture == nil && isatty(descriptor) == 1 }

    /// The terminal's width in columns (`TIOCGWINSZ`, else `$COLUMNS`); nil when neither says.
    public var columns: Int? {
        guard capture == nil else { return nil }
        var size = winsize()
        if withUnsafeMutablePointer(to: &size, { ioctl(descriptor, UInt(TIOCGWINSZ), $0) }) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        return ProcessInfo.processInfo.environment["COLUMNS"].flatMap(Int.init)
    }

    public func write(_ text: String) {
        if let capture {
            capture.append(text)
            return
        }
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { buffer in
                Foundation.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
            }
            if written <= 0 { return }
            offset += written
        }
    }

    public func writeLine(_ text: String) { write(text + "\n") }
}

/// What a command wrote to stdout and stderr while captured (``Terminal/capturing(_:)``).
public final class CapturedOutput: Sendable {
    /// One of the two streams.
    public final class Stream: Sendable {
        private let text = Mutex("")
        func append(_ more: String) { text.withLock { $0 += more } }
        public var contents: String { text.withLock { $0 } }
    }

    public let standardOutput = Stream()
    public let standardError = Stream()
}
