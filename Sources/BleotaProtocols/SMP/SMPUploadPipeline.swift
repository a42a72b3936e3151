import BleotaEngine
import BleotaLink

/// The upload of an image (or file) over SMP as a pure policy: which chunk
/// to send next, what an answer means, when to give up — with no I/O, so
/// every loss pattern is a table test. ``SMPUpdater`` performs what it asks.
///
/// The rules come from what a Zephyr device does (`img_mgmt` upload): it
/// writes a chunk only at exactly its current offset and answers every chunk
/// with the offset it has reached, so the device's offset always wins. A
/// chunk that arrives at another offset is not written; its answer tells
/// where the device is, and the pipeline goes back to that offset while it
/// keeps flowing (go-back-N, as SMP has no selective acknowledgement).
///
/// Two shapes of request, chosen from the link:
/// - **Single-packet requests** (a request fits one link packet with room
///   for data): a lost write loses a whole request, never a piece of one, so
///   the pipeline keeps its window through loss and resends from the gap.
/// - **Multi-packet requests** (a short MTU): a write lost inside a request
///   that has another right behind it lets the device glue the next request's
///   first packet into the gap — wrong bytes at the right offset, caught only
///   by the final hash. So these pipeline only while the link is clean and
///   drop to one request at a time at the first sign of loss, when a lost
///   write merely leaves a request unfinished, which the device drops.
public struct SMPUploadPipeline: Sendable {
    public struct Configuration: Sendable, Hashable {
        /// Bytes of the image or file.
        public var total: Int
        /// Data bytes per request while the link is clean.
        public var chunk: Int
        /// Data bytes of the first request, which also carries the length and the hash.
        public var firstChunk: Int
        /// Data bytes per request that keep a request within one link packet (nil: none fit).
        public var singlePacketChunk: Int?
        /// The same for the first request.
        public var singlePacketFirstChunk: Int?
        /// Requests in flight.
        public var window: Int
        /// Least data a first chunk carries (Zephyr inspects the image header in it).
        public var minimumFirstChunk: Int
        /// Waiting longer than this for an answer means it is lost.
        public var maximumAnswerTimeout: Duration
        /// Never give up on an answer sooner than this (a device drops a half-received request after a pause).
        public var minimumAnswerTimeout: Duration
        /// Timeouts in a row, with no progress, before the upload stalls.
        public var stallLimit: Int

        public init(total: Int, chunk: Int, firstChunk: Int? = nil, singlePacketChunk: Int?, singlePacketFirstChunk: Int? = nil,
                    window: Int, minimumFirstChunk: Int = 32,
                    maximumAnswerTimeout: Duration = .seconds(2), minimumAnswerTimeout: Duration = .milliseconds(600),
                    stallLimit: Int = 10) {
            self.total = total
            self.chunk = max(1, chunk)
            self.firstChunk = max(1, firstChunk ?? chunk)
            self.singlePacketChunk = singlePacketChunk.map { max(1, $0) }
            self.singlePacketFirstChunk = singlePacketFirstChunk ?? singlePacketChunk
            self.window = max(1, window)
            self.minimumFirstChunk = minimumFirstChunk
            self.maximumAnswerTimeout = maximumAnswerTimeout
            self.minimumAnswerTimeout = minimumAnswerTimeout
            self.stallLimit = stallLimit
        }
    }

    /// A chunk on its way.
    public struct InFlight: Sendable, Hashable {
        public var sequence: UInt8
        public var offset: Int
        public var end: Int
        public var sentAt: Duration
        /// Sent before the last go-back: its answer only repeats what is known.
        public var stale: Bool
        /// Sent before (this range went out earlier): its round trip is no sample (Karn).
        public var resent: Bool
    }

    /// What to do next.
    public enum Action: Sendable, Hashable {
        /// Send bytes `offset..<end`; `first` chunks announce the length and hash.
        case send(offset: Int, end: Int, first: Bool)
        /// Wait this long for an answer.
        case wait(Duration)
        /// The device holds every byte.
        case done
    }

    /// What an answer changed, for the shell's progress and notes.
    public enum AnswerOutcome: Sendable, Hashable {
        case progress(offset: Int)
        /// The device is elsewhere: the pipeline went back (or forward) to its offset.
        case moved(to: Int)
        /// The answer belongs to no live request (late, duplicated or damaged): ignored.
        case ignored
        /// The device's hash of the whole upload differs: start again.
        case mismatch
    }

    public let configuration: Configuration
    /// The device's offset as last reported.
    public private(set) var confirmed = 0
    /// Where the next chunk starts.
    public private(set) var next = 0
    public private(set) var inFlight: [InFlight] = []
    /// Whether the first chunk (with length and hash) has been answered.
    public private(set) var announced = false
    public private(set) var window: Int
    public private(set) var chunkLimit: Int
    /// Single-packet requests after the first loss (when the link allows them).
    public private(set) var singlePackets = false
    /// Whether a request can be left half-received on the device: true for multi-packet requests.
    public var requestsSpanPackets: Bool { !singlePackets }
    public private(set) var roundTrip = RoundTripEstimator()
    public private(set) var requests = 0
    public private(set) var resentBytes = 0
    public private(set) var highestSent = 0
    public private(set) var timeoutsInARow = 0
    public private(set) var lossEvents = 0
    /// Answers in a row that moved nothing forward; a device that keeps answering
    /// without taking data has stalled the upload as surely as one that is silent.
    public private(set) var answersWithoutProgress = 0
    private var cleanRun = 0
    private var firstChunkLimit: Int

    public init(_ configuration: Configuration) {
        self.configuration = configuration
        window = configuration.window
        chunkLimit = configuration.chunk
        firstChunkLimit = configuration.firstChunk
    }

    /// True once the upload cannot go on: too many timeouts or answers without progress in a row.
    public var isStalled: Bool {
        timeoutsInARow > configuration.stallLimit || answersWithoutProgress > configuration.stallLimit * 4
    }

    public var isComplete: Bool { announced && confirmed >= configuration.total && inFlight.allSatisfy(\.stale) }

    /// How long an answer may take before it counts as lost: three smoothed round
    /// trips (queueing behind earlier requests included), within the configured bounds.
    public var answerTimeout: Duration {
        let minimum = singlePackets ? min(configuration.minimumAnswerTimeout, .milliseconds(250)) : configuration.minimumAnswerTimeout
        return roundTrip.scaled(by: 3, minimum: minimum, maximum: configuration.maximumAnswerTimeout,
                                fallback: configuration.maximumAnswerTimeout)
    }

    private var liveCount: Int { inFlight.reduce(0) { $0 + ($1.stale ? 0 : 1) } }

    /// The next step: a chunk to send if the window allows, else how long to wait.
    public func nextAction() -> Action {
        if isComplete { return .done }
        if !announced {
            // Nothing flows until the device has said where it stands.
            guard liveCount == 0 else { return .wait(answerTimeout) }
            let end = min(configuration.total, max(min(configuration.minimumFirstChunk, configuration.total), firstChunkLimit))
            return .send(offset: 0, end: end, first: true)
        }
        guard liveCount < window, next < configuration.total else { return .wait(answerTimeout) }
        return .send(offset: next, end: min(configuration.total, next + chunkLimit), first: false)
    }

    /// Whether the device has forgotten the upload: it answered that it expects offset 0,
    /// which Zephyr does after any refusal. The next request must announce the image again.
    private mutating func forgetAnnouncementIfAtStart(_ offset: Int) {
        if offset == 0 { announced = false }
    }

    /// Records that the chunk `offset..<end` went out as `sequence`.
    public mutating func sent(sequence: UInt8, offset: Int, end: Int, at now: Duration) {
        requests += 1
        let resent = offset < highestSent
        if resent { resentBytes += min(end, highestSent) - offset }
        highestSent = max(highestSent, end)
        // A sequence number comes round again after 256 requests: the older holder is long gone.
        inFlight.removeAll { $0.sequence == sequence }
        inFlight.append(InFlight(sequence: sequence, offset: offset, end: end, sentAt: now, stale: false, resent: resent))
        next = end
    }

    /// Applies the device's answer to `sequence`: it stands at `offset` now.
    public mutating func answered(sequence: UInt8, offset: Int, match: Bool?, at now: Duration) -> AnswerOutcome {
        guard let index = inFlight.firstIndex(where: { $0.sequence == sequence }) else { return .ignored }
        let entry = inFlight[index]
        // Answers come in order: everything sent before this one has been answered or lost.
        inFlight.removeSubrange(...index)
        guard !entry.stale else { return .ignored }
        guard (0...configuration.total).contains(offset) else { return .ignored }
        if !entry.resent { roundTrip.add(now - entry.sentAt) }
        timeoutsInARow = 0
        if entry.offset == 0 && !announced {
            // The device answers the first chunk with where it stands: 0 means it took
            // nothing (it will need the length and hash again), more is a start or a resume.
            guard offset > 0 else {
                answersWithoutProgress += 1
                firstChunkLimit = max(min(configuration.minimumFirstChunk, configuration.total), firstChunkLimit / 2)
                return .moved(to: 0)
            }
            announced = true
            answersWithoutProgress = 0
            confirmed = offset
            next = offset
            return offset == entry.end ? .progress(offset: offset) : .moved(to: offset)
        }
        if match == false {
            restart()
            return .mismatch
        }
        if offset == entry.end {
            confirmed = offset
            answersWithoutProgress = 0
            cleanRun += 1
            if cleanRun >= 8 {
                cleanRun = 0
                if chunkLimit < configuration.chunk && !singlePackets { chunkLimit = min(configuration.chunk, chunkLimit * 2) }
                if window < configuration.window && singlePackets { window = min(configuration.window, window + 1) }
            }
            return .progress(offset: offset)
        }
        // The device is not where this chunk ended: the device's offset wins. Every
        // chunk still in flight was sent for the old position; its answer says nothing new.
        if offset <= confirmed { answersWithoutProgress += 1 } else { answersWithoutProgress = 0 }
        confirmed = offset
        goBack(to: offset, lost: offset < entry.end)
        forgetAnnouncementIfAtStart(offset)
        return .moved(to: offset)
    }

    /// The device refused a chunk as damaged ("invalid argument"): it stands where it was.
    public mutating func refused(sequence: UInt8) {
        guard let index = inFlight.firstIndex(where: { $0.sequence == sequence }) else { return }
        let stale = inFlight[index].stale
        inFlight.removeSubrange(...index)
        guard !stale else { return }
        timeoutsInARow += 1
        goBack(to: confirmed, lost: true)
    }

    /// No answer within ``answerTimeout``: what is in flight is presumed lost; start again
    /// from the device's last offset. Returns false once the upload has stalled.
    public mutating func timedOut() -> Bool {
        timeoutsInARow += 1
        if !announced {
            // A first chunk that keeps getting lost is probably too big to arrive whole: a quarter
            // each time, so a short-MTU link gets down to a few packets within a few tries.
            firstChunkLimit = max(min(configuration.minimumFirstChunk, configuration.total), firstChunkLimit / 4)
        }
        goBack(to: confirmed, lost: true)
        return !isStalled
    }

    /// After a reconnect: nothing is in flight any more, and the first chunk (with the
    /// image's hash) asks the device where it stands; Zephyr keeps the upload in RAM across
    /// connections and answers with its offset.
    public mutating func reconnected() {
        for index in inFlight.indices { inFlight[index].stale = true }
        announced = false
        timeoutsInARow = 0
    }

    /// Starts the upload over (the device dropped it: its hash differed).
    public mutating func restart() {
        for index in inFlight.indices { inFlight[index].stale = true }
        announced = false
        confirmed = 0
        next = 0
        lossEvents += 1
        adaptToLoss()
    }

    private mutating func goBack(to offset: Int, lost: Bool) {
        for index in inFlight.indices { inFlight[index].stale = true }
        next = offset
        if lost {
            lossEvents += 1
            adaptToLoss()
        }
    }

    /// After a loss: requests that fit one link packet if the link has room for them
    /// (the window stays), else one multi-packet request at a time, halving in size
    /// on further losses (a long request on a short MTU seldom arrives whole).
    private mutating func adaptToLoss() {
        cleanRun = 0
        if let single = configuration.singlePacketChunk {
            singlePackets = true
            chunkLimit = min(chunkLimit, single)
            if let first = configuration.singlePacketFirstChunk, first >= configuration.minimumFirstChunk {
                firstChunkLimit = min(firstChunkLimit, first)
            }
            return
        }
        if window > 1 {
            window = 1
            chunkLimit = max(1, chunkLimit / 2)
        } else {
            chunkLimit = max(min(16, configuration.chunk), chunkLimit / 2)
        }
        firstChunkLimit = max(min(configuration.minimumFirstChunk, configuration.total), min(firstChunkLimit, chunkLimit))
    }
}
