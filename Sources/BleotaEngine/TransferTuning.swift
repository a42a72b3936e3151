/// Every knob of a transfer, in one value so it can be printed, saved per
/// device by `bleota tune`, and passed whole to the engine.
///
/// The defaults suit a modern phone-class link talking to a device that keeps
/// up (measured on the simulator's `2m-dle` preset: 95 %+ of link capacity).
/// Slow devices need the opposite of what intuition says: fewer packets in
/// flight and a gap between them cost less than the resends a flooded receive
/// buffer causes — which is what `bleota tune` finds for you.
public struct TransferTuning: Sendable, Hashable, Codable {
    /// Payload bytes per data packet; `nil` uses the most the link allows.
    /// Bigger packets amortise the per-packet header and link-layer overhead; a
    /// smaller one fits a device whose buffers are smaller than the link's MTU.
    public var packetSize: Int?
    /// Packets sent before waiting for an acknowledgement. A window keeps the
    /// link busy across the acknowledgement's round trip (several connection
    /// intervals); a window larger than the device's buffer overflows it.
    /// The default, 32, is about two round trips of a 2M link (8 packets per
    /// 15 ms event, ~28 ms round trip): 16 reached 97 % of capacity without
    /// loss but only 66 % at 5 % loss, 24 and 32 reached 91 % (simulator, `2m-dle`).
    public var window: Int
    /// Pause after each data packet. Zero sends as fast as the link accepts;
    /// a device that needs time to write flash drops packets without one.
    public var interPacketDelay: Duration
    /// The receiver acknowledges every this many packets (capped at half the
    /// window, so an acknowledgement always arrives before the window fills).
    /// Acknowledgements are not free: on a tightly packed link an event that
    /// carries one back has room for one data packet fewer. On `1m-dle-7.5ms`
    /// (3 data packets per event) acknowledging every 8 packets reached 89 % of
    /// capacity, every 16 reached 94 %. This is what START asks; once pacing
    /// knows the link, not the receiver, sets the pace, the engine asks a
    /// receiver that can change it for
    /// ``TransferEngine/linkBoundAckInterval`` instead.
    public var ackInterval: Int
    /// How long to wait for any acknowledgement before asking for one; also the
    /// unit of the stall limit below.
    public var ackTimeout: Duration
    /// Acknowledgement timeouts in a row (with no progress) before the transfer is
    /// declared stalled and the link is treated as lost.
    public var maxRetries: Int
    /// Closed-loop pacing (``PacingController``), on by default: the window
    /// and the gap between packets follow the delivery rate and round trip the
    /// acknowledgements show, starting from `window` and `interPacketDelay` and
    /// kept within the buffer the device advertises. Off, `window` and
    /// `interPacketDelay` are used as given (what `bleota tune` measures).
    public var adaptive: Bool
    /// Send a raw-deflate stream when the device supports it. Saves airtime on
    /// images with padding or repeated data; costs device CPU. `auto` by default:
    /// real firmware deflates to about two thirds, which on a link-bound device
    /// is a third less airtime (see docs/performance.md).
    public var compression: Compression
    /// Reconnect and resume this many times after a disconnect before giving up.
    public var maxReconnects: Int

    public enum Compression: String, Sendable, Hashable, Codable, CaseIterable {
        /// Compress when the device supports it and it makes the stream smaller.
        case auto
        case on
        case off
    }

    public static let maximumWindow = 250

    public init(
        packetSize: Int? = nil, window: Int = 32, interPacketDelay: Duration = .zero, ackInterval: Int = 16,
        ackTimeout: Duration = .milliseconds(750), maxRetries: Int = 8, adaptive: Bool = true,
        compression: Compression = .auto, maxReconnects: Int = 5
    ) {
        self.packetSize = packetSize
        self.window = window
        self.interPacketDelay = interPacketDelay
        self.ackInterval = ackInterval
        self.ackTimeout = ackTimeout
        self.maxRetries = maxRetries
        self.adaptive = adaptive
        self.compression = compression
        self.maxReconnects = maxReconnects
    }

    private enum CodingKeys: String, CodingKey {
        case packetSize, window, interPacketDelay, ackInterval, ackTimeout, maxRetries, adaptive, compression, maxReconnects
    }

    /// JSON's convention (docs/commands.md): durations are numbers of seconds, not `Duration`'s
    /// own `[seconds, attoseconds]` pair.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(packetSize, forKey: .packetSize)
        try container.encode(window, forKey: .window)
        try container.encode(Self.seconds(interPacketDelay), forKey: .interPacketDelay)
        try container.encode(ackInterval, forKey: .ackInterval)
        try container.encode(Self.seconds(ackTimeout), forKey: .ackTimeout)
        try container.encode(maxRetries, forKey: .maxRetries)
        try container.encode(adaptive, forKey: .adaptive)
        try container.encode(compression, forKey: .compression)
        try container.encode(maxReconnects, forKey: .maxReconnects)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = TransferTuning()
        func duration(_ key: CodingKeys, _ fallback: Duration) throws -> Duration {
            guard let seconds = try container.decodeIfPresent(Double.self, forKey: key) else { return fallback }
            guard seconds.isFinite, seconds >= 0, seconds < 1e9 else {
                throw DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "\(seconds) is not a duration in seconds")
            }
            return .microseconds(Int64((seconds * 1_000_000).rounded()))
        }
        self.init(
            packetSize: try container.decodeIfPresent(Int.self, forKey: .packetSize),
            window: try container.decodeIfPresent(Int.self, forKey: .window) ?? defaults.window,
            interPacketDelay: try duration(.interPacketDelay, defaults.interPacketDelay),
            ackInterval: try container.decodeIfPresent(Int.self, forKey: .ackInterval) ?? defaults.ackInterval,
            ackTimeout: try duration(.ackTimeout, defaults.ackTimeout),
            maxRetries: try container.decodeIfPresent(Int.self, forKey: .maxRetries) ?? defaults.maxRetries,
            adaptive: try container.decodeIfPresent(Bool.self, forKey: .adaptive) ?? defaults.adaptive,
            compression: try container.decodeIfPresent(Compression.self, forKey: .compression) ?? defaults.compression,
            maxReconnects: try container.decodeIfPresent(Int.self, forKey: .maxReconnects) ?? defaults.maxReconnects)
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// The acknowledgement interval actually requested when the receiver's buffer is unknown.
    public var effectiveAckInterval: Int { ackInterval(receiverBuffer: nil) }

    /// The acknowledgement interval to request: at most half the window, so an
    /// acknowledgement always comes back before the window fills, and with
    /// closed-loop pacing at most half the receiver's buffer — its flight starts
    /// there, and on a device with a small buffer the sooner an acknowledgement
    /// reports the end of a flash erase, the less the device waits for data.
    public func ackInterval(receiverBuffer: Int?) -> Int {
        let flight = adaptive ? min(window, receiverBuffer ?? window) : window
        return max(1, min(ackInterval, flight / 2))
    }

    /// Checks ranges that do not depend on the link; one line per problem, naming the allowed range.
    public func validate() throws(TransferError) {
        if window < 1 || window > Self.maximumWindow {
            throw TransferError(.invalidTuning, step: .transfer, "window \(window) is out of range: use 1…\(Self.maximumWindow)")
        }
        if interPacketDelay < .zero {
            throw TransferError(.invalidTuning, step: .transfer, "inter-packet delay cannot be negative")
        }
        if ackInterval < 1 {
            throw TransferError(.invalidTuning, step: .transfer, "ack interval \(ackInterval) is out of range: use 1…\(Self.maximumWindow)")
        }
        if ackTimeout <= .zero {
            throw TransferError(.invalidTuning, step: .transfer, "ack timeout must be positive")
        }
        if maxRetries < 0 || maxReconnects < 0 {
            throw TransferError(.invalidTuning, step: .transfer, "retry and reconnect limits cannot be negative")
        }
        if let packetSize, packetSize < 1 {
            throw TransferError(.invalidTuning, step: .transfer, "packet size \(packetSize) is out of range: use at least 1")
        }
    }
}
