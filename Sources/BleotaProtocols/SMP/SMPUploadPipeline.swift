import BleotaEngine
import BleotaLink
import Foundation

/// The upload of an image (or file) over SMP as a pure policy: which chunk
/// to send next, what an answer means, when to give up — with no I/O, so
/// every loss pattern is a table test. ``SMPUpdater`` performs what it asks.
///
/// The rules come from what a Zephyr device does (`img_mgmt` upload): it
/// writes a chunk only at exactly its current offset and answers every chunk
/// with the offset it has reached, so the device's offset always wins. A
/// chunk that arrives at another offset is not written; its answer tells
/// where the device is, and the pipeline goes back to that offset while it
/// keeps flowing (go-back-N, as SMP has no selective acknowledgement). The
/// bookkeeping of that — which requests are out, which are stale, where the next
/// starts, what is sent again — is the engine's ``/BleotaEngine/GoBackRangeSender``;
/// this value is the policy that tells it what to do.
///
/// Requests keep their window through loss. On a BLE link a request spans
/// several writes, and a lost write could leave the device half a request to
/// which it appends whatever comes next; three things make that harmless:
/// the upload request puts `off` last (a glued request does not decode and
/// is refused, never written), ``SMPWriteShape`` cuts writes where the device
/// cannot mistake the middle of a request for the start of one, and after a
/// loss the shell writes filler packets that clear whatever half request the
/// device holds (``SMPUpdater``). What
/// loss still costs is the lost request and the ones in flight behind it, so
/// requests are sized to the loss rate the device's answers show: as many
/// link packets as arrive whole nine times in ten (``sizedForLoss``), full size
/// on a clean link, grown again after four clean answers. Halving at every
/// loss, as before, kept requests small long after a single loss on a good
/// link (seeds 1–4, 1 % loss: `2m-dle` 60 % of capacity against 71 % now,
/// `linux-bluez` 76 % against 83 %). Timeouts are no evidence of loss (a device
/// erasing a large flash sector answers late, not never): each one in a row
/// waits longer, and from the second in a row requests are halved, which is
/// what a device too slow for big requests needs.
package struct SMPUploadPipeline: Sendable {
    package struct Configuration: Sendable, Hashable {
        /// Bytes of the image or file.
        package var total: Int
        /// Data bytes per request while the link is clean.
        package var chunk: Int
        /// Data bytes of the first request, which also carries the length and the hash.
        package var firstChunk: Int
        /// Data bytes per request that keep a request within one link packet (nil: none fit).
        package var singlePacketChunk: Int?
        /// Requests in flight.
        package var window: Int
        /// Least data a first chunk carries (Zephyr inspects the image header in it).
        package var minimumFirstChunk: Int
        /// Waiting longer than this for an answer means it is lost.
        package var maximumAnswerTimeout: Duration
        /// Never give up on an answer sooner than this, however short the round trip.
        package var minimumAnswerTimeout: Duration
        /// Timeouts in a row, with no progress, before the upload stalls.
        package var stallLimit: Int
        /// Once the device has answered the upload, the longest it may then answer nothing at all
        /// (no upload answer, no echo, no refusal) before the upload stalls, however few timeouts
        /// that took: on a link that was losing little (``SMPUploadPipeline/silenceLossCeiling``),
        /// a device that stops answering is gone (out of power, out of range). Not before the first
        /// answer, which a device erasing its slot may take long to give. Nil: only ``stallLimit`` counts.
        package var silenceLimit: Duration?
        /// Whether the window may drop to one request at a time where the losses show the
        /// device's queue overflowing (``SMPWindowChoice``): not when the user fixed the window.
        package var measuresWindow: Bool

        /// Whether requests span several link packets (BLE writes), so that a lost
        /// write costs a whole request: then smaller requests lose less.
        package var requestsSpanPackets: Bool { singlePacketChunk.map { chunk > $0 } ?? true }

        /// Data bytes a link packet carries of a request: one packet's worth where a request fits
        /// one, else (the 23-byte MTU, 20-byte writes) ``shortLinkPacketData``.
        var dataPerPacket: Int { singlePacketChunk ?? Self.shortLinkPacketData }

        /// On a link too short for a one-packet request, the data bytes counted per packet:
        /// 16, and a request of 16 is two writes, which still arrives at half its writes lost.
        static let shortLinkPacketData = 16

        /// The least data per request that loss halves requests down to: one link packet's worth.
        var smallestChunk: Int { min(chunk, dataPerPacket) }

        package init(
            total: Int, chunk: Int, firstChunk: Int? = nil, singlePacketChunk: Int?,
            window: Int, minimumFirstChunk: Int = 32,
            maximumAnswerTimeout: Duration = .seconds(2), minimumAnswerTimeout: Duration = .milliseconds(100),
            stallLimit: Int = 10, silenceLimit: Duration? = nil, measuresWindow: Bool = false
        ) {
            self.total = total
            self.chunk = max(1, chunk)
            self.firstChunk = max(1, firstChunk ?? chunk)
            self.singlePacketChunk = singlePacketChunk.map { max(1, $0) }
            self.window = max(1, window)
            self.minimumFirstChunk = minimumFirstChunk
            self.maximumAnswerTimeout = maximumAnswerTimeout
            self.minimumAnswerTimeout = minimumAnswerTimeout
            self.stallLimit = stallLimit
            self.silenceLimit = silenceLimit
            self.measuresWindow = measuresWindow
        }
    }

    /// A chunk on its way: the engine's request, tagged with its SMP sequence number.
    package typealias InFlight = GoBackRangeSender<UInt8>.Request

    /// What to do next.
    package enum Action: Sendable, Hashable {
        /// Send bytes `offset..<end`; `first` chunks announce the length and hash.
        case send(offset: Int, end: Int, first: Bool)
        /// Wait this long for an answer.
        case wait(Duration)
        /// The device holds every byte.
        case done
    }

    /// What an answer changed, for the shell's progress and notes.
    package enum AnswerOutcome: Sendable, Hashable {
        case progress(offset: Int)
        /// The device is elsewhere: the pipeline went back (or forward) to its offset.
        case moved(to: Int)
        /// The answer belongs to no live request (late, duplicated or damaged): ignored.
        case ignored
        /// The device's hash of the whole upload differs: start again.
        case mismatch
    }

    package let configuration: Configuration
    /// The chunks out and the device's offset: the engine's go-back-N over byte ranges, which this
    /// policy tells how large each chunk is, how many may be out and when to go back.
    package private(set) var flight: GoBackRangeSender<UInt8>
    /// The device's offset as last reported.
    package var confirmed: Int { flight.confirmed }
    /// Where the next chunk starts.
    package var next: Int { flight.next }
    package var inFlight: [InFlight] { flight.inFlight }
    /// Whether the first chunk (with length and hash) has been answered.
    package private(set) var announced = false
    /// Requests in flight: the configured window, through loss too — but one where even the
    /// smallest requests span packets and keep being lost (see `adaptToLoss()`), and one where
    /// the losses fall on requests sent behind others: the device's queue overflows
    /// (``SMPWindowChoice``).
    package var window: Int { shortLinkOneAtATime ? 1 : min(windowChoice.current, busyWindow ?? .max) }
    /// Requests in flight since the device said it had no buffer for one (``busy(sequence:)``):
    /// halved at each such answer, doubled again after clean runs; nil once back at the window.
    package private(set) var busyWindow: Int?
    /// "No buffer" answers in a row, with no progress between them.
    package private(set) var busyInARow = 0
    /// Requests refused as damaged in a row (``refused(sequence:)``): from the second, requests are
    /// smaller, as a device that reads only part of a long datagram refuses every one of that size.
    private var refusalsInARow = 0
    /// Data bytes per request the device has refused at every try: requests stay below it.
    package private(set) var refusedChunk: Int?
    /// The window's measured choice between the configured window and one.
    package private(set) var windowChoice: SMPWindowChoice
    /// On a link where no request fits a packet, lost again at the smallest requests.
    private var shortLinkOneAtATime = false
    /// Data bytes per request now: halved by each loss, doubled again by clean runs.
    package private(set) var chunkLimit: Int
    package private(set) var roundTrip = RoundTripEstimator()
    package var requests: Int { flight.requests }
    package var resentBytes: Int { flight.resentBytes }
    /// Requests that carried bytes sent before (after a go-back, a timeout or a reconnection).
    package var resentRequests: Int { flight.resentRequests }
    package var highestSent: Int { flight.highestSent }
    package private(set) var timeoutsInARow = 0
    package private(set) var lossEvents = 0
    /// The echo sent while an answer was overdue (``probeDelay``), and how many requests had gone
    /// out before it: SMP answers in order, so its answer proves those were answered or lost.
    package private(set) var probe: (sequence: UInt8, after: Int)?
    /// Answers in a row that moved nothing forward; a device that keeps answering
    /// without taking data has stalled the upload as surely as one that is silent.
    package private(set) var answersWithoutProgress = 0
    private var cleanRun = 0
    /// When the device last answered anything on this connection's upload (nil: not since the
    /// upload was announced on it).
    package private(set) var lastHeard: Duration?
    /// Whether the link had lost more than ``silenceLossCeiling`` of the requests when the device last answered.
    private var lossyWhenLastHeard = false
    /// Whether the device stayed silent past ``Configuration/silenceLimit``.
    package private(set) var wentSilent = false
    private var firstChunkLimit: Int
    /// Link packets sent and requests the device's answers showed lost, lately (both halved
    /// as they grow past 800 packets): the loss rate per packet.
    private var packetsSent = 0.0
    private var packetsLost = 0.0

    package init(_ configuration: Configuration) {
        self.configuration = configuration
        flight = GoBackRangeSender(total: configuration.total)
        windowChoice = SMPWindowChoice(configured: configuration.window, measures: configuration.measuresWindow)
        chunkLimit = configuration.chunk
        firstChunkLimit = configuration.firstChunk
    }

    /// True once the upload cannot go on: too many timeouts or answers without progress in a row.
    package var isStalled: Bool {
        wentSilent || timeoutsInARow > configuration.stallLimit || answersWithoutProgress > configuration.stallLimit * 4
            || busyInARow > configuration.stallLimit
    }

    package var isComplete: Bool { announced && confirmed >= configuration.total && inFlight.allSatisfy(\.stale) }

    /// How long an answer may take before it counts as lost: three smoothed round
    /// trips (queueing behind earlier requests included), within the configured
    /// bounds, doubled for each timeout in a row (a device busy erasing a large
    /// sector answers late; giving up on it ever sooner would stall the upload).
    package var answerTimeout: Duration {
        let base = roundTrip.scaled(
            by: 3, minimum: configuration.minimumAnswerTimeout, maximum: configuration.maximumAnswerTimeout,
            fallback: configuration.maximumAnswerTimeout)
        return min(configuration.maximumAnswerTimeout, base * (1 << min(timeoutsInARow, 5)))
    }

    /// How long to wait for an answer before asking the device for an echo (``probeSent(sequence:)``),
    /// or nil when no probe is due: one is outstanding, nothing live is in flight, or
    /// ``answerTimeout`` is less than four times as long — it is that long only before the
    /// first round-trip sample or after two timeouts in a row, so the steady state never sends
    /// one (a probe costs air time, and on a BLE link a device holding half a request swallows it).
    ///
    /// A device that is slow to answer (erasing a large sector before the first chunk) answers
    /// the echo only after the chunk, so a probe never mistakes a slow device for a lost request;
    /// a lost request is found one echo's round trip after this delay instead of at the timeout.
    /// Without a round-trip sample — the first chunk, whose timeout is the longest — that is
    /// ``Configuration/minimumAnswerTimeout`` instead of ``Configuration/maximumAnswerTimeout``.
    ///
    /// Not on a link where no request fits one packet (the 23-byte MTU): there a request is many
    /// writes of a few bytes, and an echo's one write can fill the hole a lost or damaged write
    /// left in another request (in the fault matrix a mix of faults then made the device take a
    /// wrong image, which MCUboot refused at boot: a safe failure, but a failure).
    package var probeDelay: Duration? {
        guard probe == nil, liveCount > 0, configuration.singlePacketChunk != nil else { return nil }
        let delay = roundTrip.scaled(
            by: 1.5, minimum: configuration.minimumAnswerTimeout, maximum: configuration.maximumAnswerTimeout,
            fallback: configuration.minimumAnswerTimeout)
        return delay * 4 <= answerTimeout ? delay : nil
    }

    /// Records that an echo went out as `sequence` to probe the requests in flight.
    package mutating func probeSent(sequence: UInt8) {
        probe = (sequence, requests)
    }

    /// Applies the echo's answer: every live request sent before the probe that is still
    /// unanswered was lost (or its answer was), so the upload goes back to the device's offset.
    /// `.ignored` when it was not the probe's answer or nothing was missing.
    package mutating func probeAnswered(sequence: UInt8) -> AnswerOutcome {
        guard let sent = probe, sent.sequence == sequence else { return .ignored }
        probe = nil
        let missing = flight.giveUp(upTo: sent.after)
        guard !missing.isEmpty else { return .ignored }
        guard let lost = missing.first(where: { !$0.stale }) else { return .ignored }
        goBack(to: confirmed, lost: true)
        windowChanged(windowChoice.lost(behind: lost.behind))
        return .moved(to: confirmed)
    }

    private var liveCount: Int { flight.liveCount }

    /// The next step: a chunk to send if the window allows, else how long to wait.
    package func nextAction() -> Action {
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
    package mutating func sent(sequence: UInt8, offset: Int, end: Int, at now: Duration) {
        packetsSent += Double(packets(end - offset))
        if packetsSent > 800 {
            packetsSent /= 2
            packetsLost /= 2
        }
        // A sequence number comes round again after 256 requests: the engine lets the new one replace the old.
        flight.sent(sequence, offset: offset, end: end, at: now)
    }

    /// Applies the device's answer to `sequence`: it stands at `offset` now.
    package mutating func answered(sequence: UInt8, offset: Int, match: Bool?, at now: Duration) -> AnswerOutcome {
        // Answers come in order: everything sent before this one has been answered or lost. Were
        // this answer to show a loss, the request lost is the first live one it answers for.
        guard let (entry, firstLive) = flight.answer(to: sequence) else { return .ignored }
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
            busyInARow = 0
            refusalsInARow = 0
            flight.start(at: offset)
            return offset == entry.end ? .progress(offset: offset) : .moved(to: offset)
        }
        if match == false {
            restart()
            return .mismatch
        }
        if offset == entry.end {
            flight.receiver(at: offset)
            answersWithoutProgress = 0
            busyInARow = 0
            refusalsInARow = 0
            windowChoice.arrived(behind: entry.behind)
            cleanRun += 1
            if cleanRun >= (sizesForLossRate ? 4 : 8) {
                cleanRun = 0
                if let busy = busyWindow {
                    busyWindow = busy * 2 >= windowChoice.current ? nil : busy * 2
                }
                if shortLinkOneAtATime {
                    shortLinkOneAtATime = false
                } else if sizesForLossRate {
                    chunkLimit = min(sizedForLoss, max(chunkLimit, min(configuration.chunk, chunkLimit * 2)))
                } else {
                    chunkLimit = min(configuration.chunk, chunkLimit * 2)
                }
                if let refusedChunk { chunkLimit = min(chunkLimit, max(1, refusedChunk - 1)) }
            }
            return .progress(offset: offset)
        }
        // The device is not where this chunk ended: the device's offset wins. Every
        // chunk still in flight was sent for the old position; its answer says nothing new.
        if offset <= confirmed { answersWithoutProgress += 1 } else { answersWithoutProgress = 0 }
        flight.receiver(at: offset)
        goBack(to: offset, lost: offset < entry.end)
        if offset < entry.end, let firstLive { windowChanged(windowChoice.lost(behind: firstLive.behind)) }
        forgetAnnouncementIfAtStart(offset)
        return .moved(to: offset)
    }

    /// After ``SMPWindowChoice`` chose one request at a time: the losses were the device's queue
    /// overflowing, not the link's, so requests go full-sized again and the loss rate starts afresh.
    private mutating func windowChanged(_ window: Int?) {
        guard window == 1 else { return }
        chunkLimit = configuration.chunk
        packetsLost = 0
        packetsSent = 0
        cleanRun = 0
    }

    /// The device refused a chunk as damaged ("invalid argument", "corrupt"): it stands where it
    /// was. `cut`: the refusal says that the request arrived shorter than its header says
    /// ("corrupt", where each request is one datagram). Twice in a row, the request is taken to be
    /// too long for the device to read whole (a datagram longer than its transport reads arrives
    /// cut: Zephyr's UDP transport reads 1500 bytes of one): requests are halved, and stay below
    /// the size refused.
    package mutating func refused(sequence: UInt8, cut: Bool = false) {
        guard let (entry, _) = flight.answer(to: sequence), !entry.stale else { return }
        timeoutsInARow += 1
        refusalsInARow = cut ? refusalsInARow + 1 : 0
        if refusalsInARow >= 2 {
            let size = entry.end - entry.offset
            let smallest = min(configuration.minimumFirstChunk, configuration.total)
            refusedChunk = min(refusedChunk ?? .max, size)
            chunkLimit = max(smallest, min(chunkLimit, size / 2))
            firstChunkLimit = max(smallest, min(firstChunkLimit, size / 2))
        }
        goBack(to: confirmed, lost: true)
    }

    /// The device had no buffer for the request (`MGMT_ERR_ENOMEM`, or busy): alive, its data not
    /// written, and telling the host to send less at once. Zephyr answers so after a burst met
    /// buffers still full (its `NETBUF_COUNT` is 2 over UDP), often after a stall. The window is
    /// halved, the upload goes back to the device's offset without counting a loss, and the shell
    /// waits the returned pause (doubling with each such answer in a row) before sending again;
    /// `.zero` for an answer to a request already given up on. Too many in a row stall the upload.
    package mutating func busy(sequence: UInt8) -> Duration {
        guard let (entry, _) = flight.answer(to: sequence), !entry.stale else { return .zero }
        busyInARow += 1
        busyWindow = max(1, window / 2)
        cleanRun = 0
        goBack(to: confirmed, lost: false)
        let base = roundTrip.scaled(
            by: 2, minimum: configuration.minimumAnswerTimeout, maximum: configuration.maximumAnswerTimeout,
            fallback: configuration.minimumAnswerTimeout)
        return min(configuration.maximumAnswerTimeout, base * (1 << min(busyInARow - 1, 4)))
    }

    /// The device answered something at `now` (an upload answer, an echo, a refusal): it is there.
    package mutating func heard(at now: Duration) {
        lastHeard = now
        lossyWhenLastHeard = Double(lossEvents) > Double(max(1, requests)) * Self.silenceLossCeiling
    }

    /// No answer within ``answerTimeout``: what is in flight is presumed lost; start again
    /// from the device's last offset. Returns false once the upload has stalled (`now`, when
    /// given, also ends it once the device has been silent past ``Configuration/silenceLimit``).
    package mutating func timedOut(at now: Duration? = nil) -> Bool {
        timeoutsInARow += 1
        if let now, let lastHeard, let limit = configuration.silenceLimit, now - lastHeard >= limit, !lossyWhenLastHeard {
            wentSilent = true
        }
        if announced, let oldest = flight.oldestLive { windowChanged(windowChoice.lost(behind: oldest.behind)) }
        probe = nil  // unanswered too: the next wait may probe again
        if !announced {
            // A first chunk that keeps getting lost is probably too big to arrive whole: a quarter
            // each time, so a short-MTU link gets down to a few packets within a few tries.
            firstChunkLimit = max(min(configuration.minimumFirstChunk, configuration.total), firstChunkLimit / 4)
        }
        goBack(to: confirmed, lost: true, evidence: false)
        return !isStalled
    }

    /// After a reconnect: nothing is in flight any more, and the first chunk (with the
    /// image's hash) asks the device where it stands; Zephyr keeps the upload in RAM across
    /// connections and answers with its offset.
    package mutating func reconnected() {
        flight.markInFlightStale()
        probe = nil
        announced = false
        timeoutsInARow = 0
        // A device that reset meanwhile starts the upload over, and may erase its slot first.
        lastHeard = nil
    }

    /// Starts the upload over (the device dropped it: its hash differed).
    package mutating func restart() {
        flight.restart()
        announced = false
        lastHeard = nil
        lossEvents += 1
        // Something arrived other than what was sent: as good as a lost packet.
        packetsLost += 1
        adaptToLoss()
    }

    /// `evidence`: the device's answer showed the loss (a timeout may be a late answer instead).
    private mutating func goBack(to offset: Int, lost: Bool, evidence: Bool = true) {
        flight.goBack(to: offset)
        if lost {
            lossEvents += 1
            if evidence { packetsLost += 1 }
            adaptToLoss()
        }
    }

    /// Link packets a request of `bytes` data bytes takes (about: a packet's worth of data each).
    private func packets(_ bytes: Int) -> Int {
        let perPacket = configuration.dataPerPacket
        return max(1, (bytes + perPacket - 1) / perPacket)
    }

    /// Whether requests are sized to the loss rate: where a request of one link packet's worth
    /// exists. On a link too short for that (the 23-byte MTU) a request is many writes of a few
    /// bytes and a damaged or duplicated one can complete another's hole: there requests are
    /// halved at each loss and doubled after eight clean answers, which kept the fault matrix's
    /// mixed faults on `1m-no-dle-30ms` at their old success rate (loss-rate sizing there lost
    /// 12 of 272 more for a gain of 3 points at 1 % loss).
    var sizesForLossRate: Bool { configuration.singlePacketChunk != nil }

    /// The share of link packets the answers showed lost, lately.
    var lossRate: Double { min(0.5, packetsLost / max(1, packetsSent)) }

    /// A silence counts as the device gone only on a link whose losses (timeouts included) were
    /// fewer than this share of the requests when the device last answered: on one that loses half
    /// its packets, 20 s without an answer happened in 16 of the fault matrix's 140 runs at 50 %
    /// loss (seed 1) that the stall limit's count then carried through.
    static let silenceLossCeiling = 0.1

    /// How often a request should arrive whole: requests of ln 0.9 / ln(1 − p) packets at a
    /// loss rate p per packet. Measured against 0.85 and 0.93 (seeds 1–4, four link presets, 1 %
    /// and 5 % loss): 0.85 lost at 5 % on `1m-dle-7.5ms`, 0.93 lost at 5 % everywhere.
    static let wholeRequestShare = 0.9

    /// The most data per request that arrives whole `wholeRequestShare` of the time at the
    /// loss rate the answers showed lately; the configured chunk when none was lost.
    package var sizedForLoss: Int {
        let rate = lossRate
        guard rate > 0.0001 else { return configuration.chunk }
        let packetsPerRequest = min(10_000, max(1, (log(Self.wholeRequestShare) / log(1 - rate)).rounded(.down)))
        return min(configuration.chunk, max(configuration.smallestChunk, Int(packetsPerRequest) * configuration.dataPerPacket))
    }

    /// After a loss: where a lost write costs a whole request, requests sized to the
    /// loss rate seen (``sizedForLoss``), or halved from the second timeout in a row
    /// (down to one link packet's worth), so that fewer requests are lost.
    /// The window stays: requests behind a lost one are answered with the
    /// device's offset, which is how the loss is found.
    ///
    /// On a link too short for a request to fit one packet (the 23-byte MTU), a
    /// loss at the smallest requests also drops the window to one until the link
    /// is clean again: with a request in flight behind a lost one, a stale request
    /// missing its last write and a resend missing its first could make up a whole
    /// request between them — the stale one's start and the resend's `off` — and
    /// with requests of two writes that is not rare on a bad link. One at a time,
    /// whatever completes a half request is its own resend.
    private mutating func adaptToLoss() {
        cleanRun = 0
        guard configuration.requestsSpanPackets else { return }
        if configuration.singlePacketChunk == nil, chunkLimit <= configuration.smallestChunk { shortLinkOneAtATime = true }
        if sizesForLossRate, timeoutsInARow < 2 {
            chunkLimit = min(chunkLimit, sizedForLoss)
        } else {
            chunkLimit = max(configuration.smallestChunk, chunkLimit / 2)
        }
        firstChunkLimit = max(min(configuration.minimumFirstChunk, configuration.total), min(firstChunkLimit, chunkLimit))
    }
}
