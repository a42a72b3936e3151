/// The sending half of a transfer made of requests, each carrying a range of bytes and each
/// answered, in order, with the receiver's offset: go-back-N over byte ranges, as a pure value.
///
/// ``GoBackSender`` serves a wire of equal units that the receiver acknowledges together. A
/// request-and-answer wire differs in three ways, and SMP's image upload has all three: a
/// request's size is the host's choice at each send (it shrinks with loss and grows again), the
/// window counts requests rather than bytes, and the receiver's offset can move anywhere — back
/// to where it stands after a request it did not write, to 0 when it forgot the upload, forward
/// when it already held the bytes. The receiver's offset always wins.
///
/// This value keeps what going back needs: which requests are out (by the tag that their answers
/// carry: a sequence number), which of them were sent for a position given up since (stale: their
/// answers only repeat what is known), where the next request starts, and which bytes go out a
/// second time. The protocol keeps what its wire decides: how large each request is, how many may
/// be out, and what a refusal or a silence means — so every loss pattern is still a table test.
public struct GoBackRangeSender<Tag: Hashable & Sendable>: Sendable {
    /// A request on its way.
    public struct Request: Sendable, Hashable {
        /// What its answer carries to name it.
        public let tag: Tag
        /// The bytes it carries: `offset..<end`.
        public let offset: Int
        public let end: Int
        public let sentAt: Duration
        /// Sent for a position given up since: its answer only repeats what is known.
        public fileprivate(set) var stale = false
        /// Its bytes, or some of them, had gone out before: its round trip is no sample (Karn).
        public let resent: Bool
        /// Which request of the transfer this was (1, 2, …), to set it against a later probe.
        public let number: Int
        /// Sent while another live request was in flight.
        public let behind: Bool
    }

    /// Bytes in the whole transfer.
    public let total: Int
    /// The receiver's offset as it last reported it.
    public private(set) var confirmed = 0
    /// Where the next request starts.
    public private(set) var next = 0
    /// One past the furthest byte sent so far: a byte below it goes out again.
    public private(set) var highestSent = 0
    /// Requests sent and not yet answered, oldest first.
    public private(set) var inFlight: [Request] = []
    /// Requests sent, those of them that carried bytes sent before, and those bytes.
    public private(set) var requests = 0
    public private(set) var resentRequests = 0
    public private(set) var resentBytes = 0

    public init(total: Int) {
        self.total = max(0, total)
    }

    /// Requests in flight that were sent for the present position.
    public var liveCount: Int { inFlight.reduce(0) { $0 + ($1.stale ? 0 : 1) } }

    /// The oldest request in flight sent for the present position.
    public var oldestLive: Request? { inFlight.first { !$0.stale } }

    /// Records that `offset..<end` went out as `tag`, and returns the request as recorded. A tag
    /// still held by an older request (a sequence number come round again) replaces it: that
    /// holder is long gone.
    @discardableResult
    public mutating func sent(_ tag: Tag, offset: Int, end: Int, at now: Duration) -> Request {
        requests += 1
        let resent = offset < highestSent
        if resent {
            resentBytes += min(end, highestSent) - offset
            resentRequests += 1
        }
        highestSent = max(highestSent, end)
        inFlight.removeAll { $0.tag == tag }
        let request = Request(tag: tag, offset: offset, end: end, sentAt: now, resent: resent, number: requests, behind: liveCount > 0)
        inFlight.append(request)
        next = end
        return request
    }

    /// The answer to `tag` came: that request and every one sent before it leave the flight, since
    /// answers come in order and those before it were answered or lost. Returns the request and
    /// the first live one among those it answers for (the one lost, were the answer to show a
    /// loss); nil when no request in flight has that tag (a late or duplicated answer).
    public mutating func answer(to tag: Tag) -> (request: Request, firstLive: Request?)? {
        guard let index = inFlight.firstIndex(where: { $0.tag == tag }) else { return nil }
        let request = inFlight[index]
        let firstLive = inFlight[...index].first { !$0.stale }
        inFlight.removeSubrange(...index)
        return (request, firstLive)
    }

    /// The receiver said it stands at `offset`.
    public mutating func receiver(at offset: Int) {
        confirmed = offset
    }

    /// The receiver stands at `offset` and sending goes on from there, with nothing in flight sent
    /// for another position (a first answer, which tells where a receiver stands before any
    /// other request goes).
    public mutating func start(at offset: Int) {
        confirmed = offset
        next = offset
    }

    /// Sending goes back (or forward) to `offset`: every request in flight was sent for the old
    /// position, and its answer says nothing new.
    public mutating func goBack(to offset: Int) {
        markInFlightStale()
        next = offset
    }

    /// The receiver dropped everything: sending starts again from the first byte.
    public mutating func restart() {
        goBack(to: 0)
        confirmed = 0
    }

    /// A probe answered after request `number` had gone: the receiver answers in order, so every
    /// request up to it that is still unanswered was lost, or its answer was. They leave the
    /// flight and are returned, oldest first.
    public mutating func giveUp(upTo number: Int) -> [Request] {
        let missing = inFlight.filter { $0.number <= number }
        inFlight.removeAll { $0.number <= number }
        return missing
    }

    /// Every request in flight was sent for a position given up (a reconnection, a restart).
    public mutating func markInFlightStale() {
        for index in inFlight.indices { inFlight[index].stale = true }
    }
}
