/// How a host half tells, from its own clock, whether it waited for the link: what the hosts
/// that send ahead of their answers (legacy DFU's groups, a described protocol's reads) use to
/// grow what goes ahead while the device keeps up.
enum AnswerTiming {
    /// A wait for an answer shorter than this found it already in: taking it off the link's queue
    /// takes microseconds, the shortest connection event 7.5 ms.
    static let alreadyIn = Duration.milliseconds(1)

    /// A request's write that took longer than this waited for the request before it (ATT lets one
    /// out at a time, until its Write Response): half the shortest connection interval. A write
    /// that went at once returns in microseconds; one held for a Write Response waits an event at least.
    static let waitedForTheRequestBefore = Duration.microseconds(3_750)
}

/// How long to wait for an answer that comes at the device's pace (an Espressif sector's
/// acknowledgement, a legacy DFU receipt at one write a receipt) before taking it for lost:
/// a few times the longest of the last few, rather than the response timeout. An answer that
/// never comes (its write lost) then costs a fraction of a second, not 2 s.
struct RecentAnswerWait: Sendable {
    /// Answers remembered.
    static let kept = 8
    /// The wait is this many times the longest remembered…
    static let gain = 4
    private(set) var samples: [Duration] = []

    /// An answer took `duration` (after its write, or after the answer before it).
    mutating func add(_ duration: Duration) {
        samples = Array((samples + [duration]).suffix(Self.kept))
    }

    /// …at least `shortest`, at most `longest`; `longest` until two answers were seen.
    func wait(atLeast shortest: Duration, atMost longest: Duration) -> Duration {
        guard samples.count >= 2, let slowest = samples.max() else { return longest }
        return min(longest, max(shortest, slowest * Self.gain))
    }
}
