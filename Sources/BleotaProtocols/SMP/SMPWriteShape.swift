/// Where bleota cuts an SMP request into ATT writes, so that a lost write
/// costs as little as it can on a Zephyr device.
///
/// Zephyr's BLE reassembly (`smp_reassembly.c`) takes a write as the start
/// of a new request whenever no request is partly received, reads the
/// request's length from bytes 2–3 of that write, and then appends every
/// following write, with no timeout, until the length is reached or a write
/// does not fit (`-EOVERFLOW`: the partial request and the write are dropped).
/// So after a lost write the device drops the rest of that request, and
/// takes the next writes — the middle of some request, image bytes — for
/// starts of requests. Most such "headers" give a length longer than the
/// device's buffer (`-ENOSR`) or shorter than the write itself (`-EOVERFLOW`)
/// and the write is dropped; but about one in thirty gives a length that fits,
/// and then the device collects a request of garbage that swallows the next
/// requests' writes, first writes included, until it overflows: the requests
/// that would have told bleota where the device stands are lost too, and only
/// a timeout ends the silence.
///
/// The cut avoids that: every write after a request's first is made up to
/// ``slack`` bytes shorter than the link's largest, so that the write after
/// it starts with bytes that no device would take for a request it can hold.
/// (The request's own bytes are not changed; only where the writes end.)
///
/// What keeps a device from ever *accepting* a request glued from a lost
/// write's remains and later writes is the field order of the upload request:
/// `off` comes last, so a glued request ends in bytes that are not `off` and
/// the device refuses it (``SMPUploadRequest/body``).
public struct SMPWriteShape: Sendable, Hashable {
    /// The link's largest write.
    public let payload: Int
    /// The device's SMP buffer (`buf_size`): a length above it is dropped as too long.
    public let bufferSize: Int
    /// How many bytes shorter than ``payload`` a write may be made.
    public let slack: Int

    public init(payload: Int, bufferSize: Int, slack: Int = 16) {
        self.payload = max(1, payload)
        self.bufferSize = bufferSize
        self.slack = max(0, min(slack, payload / 4))
    }

    /// Writes of the link's largest payload, cut wherever they fall: how answers and
    /// requests over links where the device's reassembly does not matter go out.
    public static func largestWrites(payload: Int) -> SMPWriteShape {
        SMPWriteShape(payload: payload, bufferSize: .max, slack: 0)
    }

    /// Whether a write of `bytes[start...]`, taken by the device for the start of a
    /// request, would be dropped at once rather than begin collecting one: too
    /// short for a header (`-ENODATA`), a length above the buffer (`-ENOSR`), or
    /// shorter than the write (`-EOVERFLOW`). `shortest` is the least the write can be.
    func isHarmlessStart(_ bytes: [UInt8], at start: Int, shortest: Int) -> Bool {
        guard shortest >= SMPHeader.size, start + 3 < bytes.count else { return true }
        let length = SMPHeader.size + (Int(bytes[start + 2]) << 8 | Int(bytes[start + 3]))
        return length > bufferSize || length < shortest
    }

    /// The writes of `bytes` (one request), as ranges in order.
    public func writes(of bytes: [UInt8]) -> [Range<Int>] {
        guard bytes.count > payload else { return [0..<bytes.count] }
        var ranges: [Range<Int>] = []
        var start = 0
        while start < bytes.count {
            var end = min(bytes.count, start + payload)
            // Where a write ends, the next one starts: every such cut is chosen (when there is slack to choose in).
            if end < bytes.count, slack > 0 {
                let candidates = stride(from: end, through: max(start + 1, end - slack), by: -1)
                end =
                    candidates.first { cut in
                        cut >= bytes.count || isHarmlessStart(bytes, at: cut, shortest: min(bytes.count - cut, payload - slack))
                    } ?? end
            }
            ranges.append(start..<end)
            start = end
        }
        return ranges
    }
}
