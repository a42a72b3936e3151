/// Finding transfer settings for one device and link by measuring them.
///
/// A trial sends a short test transfer with one setting (packet size, window,
/// inter-packet delay) and records goodput, loss and resends. The search is a
/// coordinate descent over the grid: from the default setting it measures the
/// neighbours along one dimension at a time and moves to the best while that
/// improves the score by more than `minimumGain`; it stops when no neighbour
/// does. Goodput surfaces of real links are close to unimodal along each axis
/// (too small a packet wastes headers, too large a window overflows the
/// device; too little delay floods it, too much idles the link), which is why
/// a handful of trials usually lands within a few per cent of the grid's best.
public struct TuningPoint: Sendable, Hashable, Codable, CustomStringConvertible {
    public var packetSize: Int
    public var window: Int
    /// Inter-packet delay in microseconds (Codable-friendly).
    public var delayMicroseconds: Int

    public init(packetSize: Int, window: Int, delay: Duration) {
        self.packetSize = packetSize
        self.window = window
        delayMicroseconds = Int(delay.components.seconds * 1_000_000 + delay.components.attoseconds / 1_000_000_000_000)
    }

    public var delay: Duration { .microseconds(delayMicroseconds) }

    public var description: String {
        "packet \(packetSize), window \(window), delay \(Double(delayMicroseconds) / 1000) ms"
    }

    private enum CodingKeys: String, CodingKey { case packetSize, window, delayMilliseconds, delayMicroseconds }

    /// The delay in milliseconds, as the command line's `--delay` takes it (tuning.json). Files
    /// saved by 0.1.0 hold `delayMicroseconds`, which is still read.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(packetSize, forKey: .packetSize)
        try container.encode(window, forKey: .window)
        try container.encode(Double(delayMicroseconds) / 1000, forKey: .delayMilliseconds)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        packetSize = try container.decode(Int.self, forKey: .packetSize)
        window = try container.decode(Int.self, forKey: .window)
        if let milliseconds = try container.decodeIfPresent(Double.self, forKey: .delayMilliseconds) {
            guard milliseconds.isFinite, (0...60_000).contains(milliseconds) else {
                throw DecodingError.dataCorruptedError(forKey: .delayMilliseconds, in: container, debugDescription: "\(milliseconds) is not 0…60000 ms")
            }
            delayMicroseconds = Int((milliseconds * 1000).rounded())
        } else {
            delayMicroseconds = try container.decode(Int.self, forKey: .delayMicroseconds)
        }
    }

    /// `base` with this point's three settings.
    public func apply(to base: TransferTuning) -> TransferTuning {
        var tuning = base
        tuning.packetSize = packetSize
        tuning.window = window
        tuning.interPacketDelay = delay
        return tuning
    }
}

public struct TuningTrial: Sendable, Codable, Equatable {
    public var point: TuningPoint
    /// Payload bytes per second of transfer time.
    public var goodput: Double
    /// Packets lost on the way over packets sent.
    public var loss: Double
    public var packetsSent: Int
    public var packetsResent: Int
    /// Why the trial failed, when it did.
    public var failure: String?

    public init(point: TuningPoint, goodput: Double, loss: Double, packetsSent: Int, packetsResent: Int, failure: String? = nil) {
        self.point = point
        self.goodput = goodput
        self.loss = loss
        self.packetsSent = packetsSent
        self.packetsResent = packetsResent
        self.failure = failure
    }

    /// Goodput for settings that lose under 1 % of packets. Lossy settings score far
    /// lower and ever lower as loss grows, so the search walks downhill in loss
    /// until it reaches clean settings, and only then climbs in goodput.
    public var score: Double {
        guard failure == nil else { return -1 }
        if loss < TuningSearch.acceptableLoss { return goodput }
        let kept = max(0, 1 - loss)
        return goodput * 0.5 * kept * kept * kept * kept
    }
}

/// The settings a search may try.
public struct TuningSpace: Sendable, Codable, Equatable {
    public var packetSizes: [Int]
    public var windows: [Int]
    public var delaysMicroseconds: [Int]

    public init(packetSizes: [Int], windows: [Int], delays: [Duration]) {
        self.packetSizes = packetSizes.sorted()
        self.windows = windows.sorted()
        delaysMicroseconds = delays.map { TuningPoint(packetSize: 0, window: 0, delay: $0).delayMicroseconds }.sorted()
    }

    /// Packet sizes from an eighth of the link's largest to all of it; windows 2…32; delays 0…16 ms.
    public static func standard(maximumPacket: Int) -> TuningSpace {
        let sizes = Set([maximumPacket, maximumPacket * 3 / 4, maximumPacket / 2, maximumPacket / 4].map { max(8, $0) })
        return TuningSpace(
            packetSizes: Array(sizes), windows: [2, 4, 8, 16, 32],
            delays: [.zero, .milliseconds(1), .milliseconds(2), .milliseconds(4), .milliseconds(8), .milliseconds(16)])
    }

    /// The space along the knobs a protocol has: a knob it lacks is held at its first value (no
    /// delay, the smallest window), so trials are not spent on settings that change nothing.
    public func restricted(to knobs: Set<TuningKnob>) -> TuningSpace {
        var space = self
        if !knobs.contains(.delay) { space.delaysMicroseconds = [0] }
        if !knobs.contains(.window) { space.windows = Array(windows.prefix(1)) }
        if !knobs.contains(.packetSize) { space.packetSizes = Array(packetSizes.suffix(1)) }
        return space
    }

    public var count: Int { packetSizes.count * windows.count * delaysMicroseconds.count }

    public var allPoints: [TuningPoint] {
        var points: [TuningPoint] = []
        for size in packetSizes {
            for delay in delaysMicroseconds {
                for window in windows { points.append(TuningPoint(packetSize: size, window: window, delay: .microseconds(delay))) }
            }
        }
        return points
    }

    /// The grid point nearest `point` (each coordinate snapped to its nearest value).
    public func snap(_ point: TuningPoint) -> TuningPoint {
        func nearest(_ values: [Int], _ value: Int) -> Int { values.min { abs($0 - value) < abs($1 - value) } ?? value }
        return TuningPoint(
            packetSize: nearest(packetSizes, point.packetSize), window: nearest(windows, point.window),
            delay: .microseconds(nearest(delaysMicroseconds, point.delayMicroseconds)))
    }

    /// The neighbours of `point` along one axis (one step down and one up).
    func neighbours(of point: TuningPoint) -> [TuningPoint] {
        var result: [TuningPoint] = []
        func around(_ values: [Int], _ value: Int, _ make: (Int) -> TuningPoint) {
            guard let index = values.firstIndex(of: value) else { return }
            if index > 0 { result.append(make(values[index - 1])) }
            if index + 1 < values.count { result.append(make(values[index + 1])) }
        }
        around(delaysMicroseconds, point.delayMicroseconds) { TuningPoint(packetSize: point.packetSize, window: point.window, delay: .microseconds($0)) }
        around(windows, point.window) { TuningPoint(packetSize: point.packetSize, window: $0, delay: point.delay) }
        around(packetSizes, point.packetSize) { TuningPoint(packetSize: $0, window: point.window, delay: point.delay) }
        return result
    }

    /// Steps that change window and delay together: pacing trades one for the other, so
    /// the best settings often lie on a diagonal ridge that single-axis steps cannot climb.
    func diagonals(of point: TuningPoint) -> [TuningPoint] {
        guard let w = windows.firstIndex(of: point.window), let d = delaysMicroseconds.firstIndex(of: point.delayMicroseconds) else { return [] }
        var result: [TuningPoint] = []
        for (dw, dd) in [(1, 1), (-1, -1), (1, -1), (-1, 1)] {
            let wi = w + dw, di = d + dd
            guard windows.indices.contains(wi), delaysMicroseconds.indices.contains(di) else { continue }
            result.append(TuningPoint(packetSize: point.packetSize, window: windows[wi], delay: .microseconds(delaysMicroseconds[di])))
        }
        return result
    }
}

public enum TuningSearch {
    /// Loss below this counts as clean.
    public static let acceptableLoss = 0.01
    /// A move must beat the current score by this fraction.
    public static let minimumGain = 0.02

    /// Coordinate descent from `start`, then again from a cautious start (the largest
    /// packet, the second-smallest window, no delay) when trials remain: slow devices
    /// often have a second, better mode at small windows that a descent from the
    /// aggressive default does not reach. Every measured trial is returned, in order.
    public static func search(
        _ space: TuningSpace, from start: TuningPoint, maximumTrials: Int? = nil,
        measure: (TuningPoint) async -> TuningTrial
    ) async -> [TuningTrial] {
        var trials: [TuningPoint: TuningTrial] = [:]
        var order: [TuningTrial] = []
        let limit = maximumTrials ?? max(4, space.count / 4)
        func measured(_ point: TuningPoint) async -> TuningTrial {
            if let known = trials[point] { return known }
            let trial = await measure(point)
            trials[point] = trial
            order.append(trial)
            return trial
        }
        func descend(from point: TuningPoint) async {
            var current = await measured(point)
            while order.count < limit {
                var best = current
                for neighbour in space.neighbours(of: current.point) {
                    if trials[neighbour] == nil, order.count >= limit { break }
                    let trial = await measured(neighbour)
                    if trial.score > best.score { best = trial }
                }
                if best.score <= current.score * (1 + minimumGain) {
                    // Stuck along every axis: try the window × delay diagonals before giving up.
                    for neighbour in space.diagonals(of: current.point) {
                        if trials[neighbour] == nil, order.count >= limit { break }
                        let trial = await measured(neighbour)
                        if trial.score > best.score { best = trial }
                    }
                }
                guard best.score > current.score * (1 + minimumGain) else { return }
                current = best
            }
        }
        await descend(from: space.snap(start))
        let cautious = TuningPoint(
            packetSize: space.packetSizes.last ?? start.packetSize,
            window: space.windows.count > 1 ? space.windows[1] : space.windows.first ?? start.window, delay: .zero)
        if order.count < limit, trials[cautious] == nil { await descend(from: cautious) }
        return order
    }

    /// Every point of the grid.
    public static func grid(_ space: TuningSpace, measure: (TuningPoint) async -> TuningTrial) async -> [TuningTrial] {
        var trials: [TuningTrial] = []
        for point in space.allPoints { trials.append(await measure(point)) }
        return trials
    }

    /// The trial to choose, and why, compared with `reference` (the default setting's trial).
    public static func choose(_ trials: [TuningTrial], reference: TuningTrial?) -> (TuningTrial, [String])? {
        guard let best = trials.max(by: { $0.score < $1.score }), best.failure == nil else { return nil }
        var reasons: [String] = []
        let clean = trials.filter { $0.failure == nil && $0.loss < acceptableLoss }
        if best.loss < acceptableLoss {
            reasons.append("the highest goodput of the \(clean.count) settings that lost under 1 % of packets")
        } else {
            reasons.append("no setting lost under 1 % of packets; this one had the best goodput with loss counted against it")
        }
        if let reference, reference.point != best.point {
            if reference.failure != nil {
                reasons.append("the default setting failed (\(reference.failure!))")
            } else {
                let gain = reference.goodput > 0 ? (best.goodput / reference.goodput - 1) * 100 : 0
                reasons.append(String(format: "%+.0f %% goodput over the default setting held fixed (%@)", gain, reference.point.description))
                if reference.loss >= acceptableLoss {
                    reasons.append(String(format: "loss %.1f %% instead of the default's %.1f %%", best.loss * 100, reference.loss * 100))
                }
            }
        } else if reference?.point == best.point {
            reasons.append("the default setting held fixed is already the best found")
        }
        return (best, reasons)
    }
}
