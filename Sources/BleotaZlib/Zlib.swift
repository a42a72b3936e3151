import CSystemZlib

/// The one doorway to zlib.
///
/// bleota uses zlib for two jobs: CRC-32/ISO-HDLC (the checksum every firmware
/// format and our own protocol carries) and raw deflate for compressed transfers.
/// No other module imports `CSystemZlib`; they import this module, whose types are
/// plain Swift values with typed errors, so the C library's pointer juggling
/// stays in one file.
public enum Zlib {
    /// The version string zlib reports at run time, for `bleota --version --verbose`.
    public static var version: String { String(cString: zlibVersion()) }

    /// Continues a CRC-32/ISO-HDLC over `bytes`; start with `crc = 0`.
    ///
    /// zlib's `crc32` takes a 32-bit length, so long buffers are fed in slices.
    public static func crc32<Bytes: Collection<UInt8>>(_ crc: UInt32, _ bytes: Bytes) -> UInt32 {
        var value = UInt(crc)
        let done = bytes.withContiguousStorageIfAvailable { buffer -> Bool in
            value = update(value, UnsafeRawBufferPointer(buffer))
            return true
        }
        if done == nil {
            let copy = Array(bytes)
            copy.withUnsafeBytes { value = update(value, $0) }
        }
        return UInt32(truncatingIfNeeded: value)
    }

    private static func update(_ crc: UInt, _ buffer: UnsafeRawBufferPointer) -> UInt {
        guard var base = buffer.baseAddress?.assumingMemoryBound(to: Bytef.self) else { return crc }
        var remaining = buffer.count
        var value = crc
        while remaining > 0 {
            let chunk = min(remaining, 1 << 30)
            value = CSystemZlib.crc32(value, base, uInt(chunk))
            base += chunk
            remaining -= chunk
        }
        return value
    }
}

/// Why zlib refused a stream.
public struct ZlibError: Error, Sendable, Equatable, CustomStringConvertible {
    /// zlib's own return code (`Z_DATA_ERROR` is -3, `Z_BUF_ERROR` -5, …).
    public var code: Int32
    /// zlib's message when it gave one, otherwise a description of the code.
    public var message: String
    public init(code: Int32, message: String) {
        self.code = code
        self.message = message
    }
    public var description: String { "zlib error \(code): \(message)" }
}

/// Whether a stream is raw deflate (RFC 1951, what our protocol sends: no header
/// to waste airtime on) or zlib-wrapped (RFC 1950, with an Adler-32 trailer).
public enum DeflateFormat: Sendable {
    case raw
    case zlib

    var windowBits: Int32 { self == .raw ? -15 : 15 }
}

/// A streaming compressor: feed it chunks, collect what comes out, finish once.
///
/// It is a class because zlib's `z_stream` holds pointers into itself and must not
/// move; it is not `Sendable` (one owner at a time).
public final class Deflater {
    private var stream = z_stream()
    private var finished = false

    /// - Parameters:
    ///   - level: 0 (store) … 9 (smallest); 6 is zlib's own default.
    ///   - format: raw deflate (what bleota's native protocol sends), zlib or gzip framing.
    public init(level: Int32 = 6, format: DeflateFormat = .raw) throws(ZlibError) {
        let status = deflateInit2_(
            &stream, level, Z_DEFLATED, format.windowBits, 8, Z_DEFAULT_STRATEGY,
            ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else { throw ZlibError(code: status, message: "deflateInit2 failed") }
    }

    deinit { deflateEnd(&stream) }

    /// Compresses `input`, returning the bytes zlib produced so far (often none).
    public func update(_ input: some Collection<UInt8>) throws(ZlibError) -> [UInt8] {
        try run(Array(input), flush: Z_NO_FLUSH)
    }

    /// Flushes to a byte boundary without ending the stream, so everything fed so
    /// far can be decompressed by the peer now (used per transfer chunk).
    public func flush() throws(ZlibError) -> [UInt8] { try run([], flush: Z_SYNC_FLUSH) }

    /// Ends the stream and returns its last bytes.
    public func finish() throws(ZlibError) -> [UInt8] {
        guard !finished else { return [] }
        finished = true
        return try run([], flush: Z_FINISH)
    }

    private func run(_ input: [UInt8], flush: Int32) throws(ZlibError) -> [UInt8] {
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        var input = input
        var status: Int32 = Z_OK
        input.withUnsafeMutableBufferPointer { inBuf in
            stream.next_in = inBuf.baseAddress
            stream.avail_in = uInt(inBuf.count)
            repeat {
                chunk.withUnsafeMutableBufferPointer { outBuf in
                    stream.next_out = outBuf.baseAddress
                    stream.avail_out = uInt(outBuf.count)
                    status = deflate(&stream, flush)
                    let produced = outBuf.count - Int(stream.avail_out)
                    output.append(contentsOf: outBuf[0..<produced])
                }
            } while stream.avail_out == 0 && status != Z_STREAM_END && status >= 0
            stream.next_in = nil
        }
        if status < 0 && status != Z_BUF_ERROR {
            throw ZlibError(code: status, message: Self.message(stream.msg, code: status))
        }
        return output
    }

    static func message(_ msg: UnsafeMutablePointer<CChar>?, code: Int32) -> String {
        if let msg { return String(cString: msg) }
        switch code {
        case Z_DATA_ERROR: return "corrupt or truncated compressed data"
        case Z_MEM_ERROR: return "out of memory"
        case Z_BUF_ERROR: return "compressed data ended early"
        case Z_STREAM_ERROR: return "invalid stream state"
        default: return "unexpected status"
        }
    }
}

/// A streaming decompressor, the mirror of ``Deflater``.
public final class Inflater {
    private var stream = z_stream()
    /// True once the compressed stream's end marker has been seen.
    public private(set) var isFinished = false

    public init(format: DeflateFormat = .raw) throws(ZlibError) {
        let status = inflateInit2_(&stream, format.windowBits, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else { throw ZlibError(code: status, message: "inflateInit2 failed") }
    }

    deinit { inflateEnd(&stream) }

    /// Decompresses `input`; throws on corrupt data, never traps.
    ///
    /// - Parameters:
    ///   - input: compressed bytes, in any number of pieces across calls.
    ///   - limit: the most output bytes accepted in total for this call,
    ///     so a hostile stream cannot balloon memory (a "zip bomb").
    public func update(_ input: some Collection<UInt8>, limit: Int = .max) throws(ZlibError) -> [UInt8] {
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        var input = Array(input)
        var status: Int32 = Z_OK
        var overLimit = false
        input.withUnsafeMutableBufferPointer { inBuf in
            stream.next_in = inBuf.baseAddress
            stream.avail_in = uInt(inBuf.count)
            repeat {
                chunk.withUnsafeMutableBufferPointer { outBuf in
                    stream.next_out = outBuf.baseAddress
                    stream.avail_out = uInt(outBuf.count)
                    status = inflate(&stream, Z_NO_FLUSH)
                    let produced = outBuf.count - Int(stream.avail_out)
                    output.append(contentsOf: outBuf[0..<produced])
                }
                if output.count > limit { overLimit = true }
            } while !overLimit && status == Z_OK && (stream.avail_in > 0 || stream.avail_out == 0)
            stream.next_in = nil
        }
        if overLimit {
            throw ZlibError(code: Z_BUF_ERROR, message: "decompressed data exceeds the \(limit)-byte limit")
        }
        if status == Z_STREAM_END {
            isFinished = true
            return output
        }
        if status == Z_NEED_DICT { throw ZlibError(code: status, message: "stream needs a preset dictionary") }
        if status < 0 && status != Z_BUF_ERROR {
            throw ZlibError(code: status, message: Deflater.message(stream.msg, code: status))
        }
        return output
    }
}
