/// How fast a campaign's devices finish, and when the rest will have: the rate and ETA of
/// `fleet status --watch`, from the looks it takes (pure: the looks and their times in).
///
/// The rate is over the last minute of looks (the first look and the last within it), so a
/// stage that opens or a halt shows within a minute rather than being averaged away.
public struct CampaignPace: Sendable, Equatable {
    /// One look: when, and how many devices had finished.
    public struct Look: Sendable, Equatable {
        public var at: Duration
        public var finished: Int
    }

    /// Looks within the window.
    public private(set) var looks: [Look] = []
    public private(set) var total = 0
    public let window: Duration

    public init(window: Duration = .seconds(60)) { self.window = window }

    /// A look `at` (any clock, as long as it is the same one each time): `finished` of `total` done.
    public mutating func observe(finished: Int, of total: Int, at time: Duration) {
        self.total = total
        looks.append(Look(at: time, finished: finished))
        // Keep the oldest look still within the window, and the one just before it, so the rate
        // always spans up to a whole window.
        while looks.count > 2, time - looks[1].at >= window { looks.removeFirst() }
    }

    /// Devices finished a minute, over the looks kept; nil until two looks some time apart.
    public var perMinute: Double? {
        guard let first = looks.first, let last = looks.last, last.at > first.at else { return nil }
        let minutes = Double((last.at - first.at) / .milliseconds(1)) / 60_000
        return Double(last.finished - first.finished) / minutes
    }

    /// Seconds until every device has finished at this rate; nil while there is no rate, or none.
    public var etaSeconds: Double? {
        guard let rate = perMinute, rate > 0, let last = looks.last else { return nil }
        return Double(total - last.finished) / rate * 60
    }

    /// "12.5 devices a minute, about 4 min 10 s left", as `--watch` prints it.
    public var sentence: String {
        guard let rate = perMinute else { return "rate: measuring" }
        let rateText = "\(rate.formatted(decimals: 1)) devices a minute"
        if let last = looks.last, last.finished >= total { return rateText + ", every device finished" }
        guard let eta = etaSeconds else { return rateText + ": none finishing now (halted, between stages, or waiting for its window)" }
        let seconds = Int(eta.rounded())
        let left = seconds >= 3600 ? "\(seconds / 3600) h \(seconds % 3600 / 60) min" : seconds >= 60 ? "\(seconds / 60) min \(seconds % 60) s" : "\(seconds) s"
        return rateText + ", about \(left) left"
    }
}
