/// Whether SMP's requests go under the configured window or one at a time, chosen by where the
/// losses fall: part of ``SMPUploadPipeline``'s policy, pure and driven by its answers.
///
/// A device slower than its link whose receive queue holds less than a request (`slow-flash`:
/// 4 writes, requests of 10) drops the writes of a request sent behind another still in flight,
/// and only requests sent alone arrive whole; one at a time, full-sized, they reach what its wire
/// allows (26.1 KiB/s there, against 19.6 pipelined, where losses also shrink the requests). A
/// link that loses writes at random loses requests alone as often as behind others, and there the
/// window moves far more (1 % loss on `slow-flash`: 18.6 KiB/s pipelined, 8.4 one at a time,
/// each loss costing a timeout with nothing else in flight). Counting losses, or measuring
/// each setting's rate in turn, cannot tell the two apart cheaply; where the losses fall can.
///
/// So: requests are counted by whether they went alone (nothing else live in flight: the first
/// request, a resend after a go-back) or behind another, and by whether they arrived. Once
/// ``evidenceNeeded`` requests behind others were lost, at least ``floodingLossRate`` of them,
/// and requests alone (``aloneSamples`` of them at least) were lost at a third of that rate or
/// less, requests go one at a time. Random loss does not get there: the pipeline sizes requests
/// so that nine in ten arrive whole, alone or behind. A request lost one at a time shows the
/// link loses writes anyway: the window comes back, and the evidence needed to leave it again
/// doubles. (Staying one at a time through such losses was tried: on `slow-flash` at 1 % loss
/// each costs a timeout with nothing else in flight, 7.9 KiB/s against 16.5 going back.)
package struct SMPWindowChoice: Sendable {
    /// Requests sent alone, arrived or lost, before losses behind others count as flooding.
    package static let aloneSamples = 6
    /// The share of requests sent behind others lost that is flooding.
    package static let floodingLossRate = 0.3

    /// The window asked for (the device's buffers less one, or `--window`).
    package let configured: Int
    /// Whether it may leave the configured window at all (not when `--window` fixed it).
    package let measures: Bool
    /// The window requests go under now.
    package private(set) var current: Int
    /// Since the window last changed: requests sent alone that arrived and that were lost, and the same for requests sent behind another.
    package private(set) var aloneArrived = 0
    package private(set) var aloneLost = 0
    package private(set) var behindArrived = 0
    package private(set) var behindLost = 0
    /// Requests behind others lost that make one at a time the window.
    package private(set) var evidenceNeeded = 3

    package init(configured: Int, measures: Bool) {
        self.configured = max(1, configured)
        self.measures = measures && configured > 1
        current = self.configured
    }

    /// A request arrived whole (its answer moved the upload to its end).
    package mutating func arrived(behind: Bool) {
        if behind { behindArrived += 1 } else { aloneArrived += 1 }
    }

    /// A request was lost (or its answer was): returns the window it changes to, if it does.
    package mutating func lost(behind: Bool) -> Int? {
        guard measures else { return nil }
        if current == 1 {
            // Lost with nothing ahead of it: the link itself loses writes.
            current = configured
            evidenceNeeded = min(96, evidenceNeeded * 2)
            reset()
            return current
        }
        if behind { behindLost += 1 } else { aloneLost += 1 }
        let alone = aloneArrived + aloneLost
        guard alone >= Self.aloneSamples, behindLost >= evidenceNeeded else { return nil }
        let behindRate = Double(behindLost) / Double(behindLost + behindArrived)
        let aloneRate = Double(aloneLost) / Double(alone)
        guard behindRate >= Self.floodingLossRate, aloneRate <= behindRate / 3 else { return nil }
        current = 1
        reset()
        return current
    }

    private mutating func reset() {
        aloneArrived = 0
        aloneLost = 0
        behindArrived = 0
        behindLost = 0
    }
}
