import Foundation

/// stdout/stderr writers that know whether they are a terminal.
///
/// Progress bars redraw a line with `\r` only on a terminal; piped output gets
/// one line per step so logs and CI transcripts stay readable.
public struct Terminal: Sendable {
    public let descriptor: Int32

    public static let standardOutput = Terminal(descriptor: STDOUT_FILENO)
    public static let standardError = Terminal(descriptor: STDERR_FILENO)

    public var isInteractive: Bool { isatty(descriptor) == 1 }

    /// The terminal's width in columns (`TIOCGWINSZ`, else `$COLUMNS`); nil when neither says.
    public var columns: Int? {
        var size = winsize()
        if withUnsafeMutablePointer(to: &size, { ioctl(descriptor, UInt(TIOCGWINSZ), $0) }) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        return ProcessInfo.processInfo.environment["COLUMNS"].flatMap(Int.init)
    }

    public func write(_ text: String) {
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
