/// A byte stream cut at a delimiter byte: what a serial port carries. SMP's console
/// cuts it into lines (0x0A), Nordic's SLIP into frames (0xC0), and each protocol puts
/// its framing on it (``Link/send(_:)`` writes bytes as they are; ``Link/receive()`` is
/// the next line). Protocols see only this, never the port: the tty, the
/// pseudo-terminal of `sim serve --serial` or a test's pipe is behind it, so a
/// protocol's serial framing runs on any platform's serial API.
public protocol DelimitedByteStream: Link {
    /// The bytes up to the next `delimiter`, without it.
    func receive(until delimiter: UInt8) async throws(LinkError) -> [UInt8]
}
