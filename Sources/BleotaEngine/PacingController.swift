/// Closed-loop pacing: how many packets may be in flight and how far apart
/// to send them, estimated from the receiver's acknowledgements.
///
/// The idea is the one modern congestion control uses (BBR, and the delivery-rate
/// estimation draft it rests on): measure the rate at which acknowledgements
/// report data delivered and the shortest round trip, and size the flight from
/// their product, instead of halving the window whenever a packet is lost.
/// Halving is wrong on BLE twice over: radio loss of a few percent says nothing
/// about the receiver, and a device that stalls to erase flash loses a burst
/// every page however slowly it is fed.
///
/// What is specific to BLE devices is the receive buffer. A device advertises
/// how many packets it can queue (the native HELLO's buffer count, MCUmgr's
/// `buf_count`). While the flight fits in that buffer nothing can overflow it,
/// so packets go out back to back and the link's own flow control paces them.
/// Only when the flight must be larger than the buffer to cover the round
/// trip — a fast link to a slow device — are packets spaced at the measured
/// delivery rate, so each connection event brings no more than the device
/// drains between events.
///
/// A pure state machine: the ``TransferEngine`` reports sends, acknowledgements
/// and timeouts with their times and reads ``window`` and ``gap``; tests drive it
/// as a table, on made-up times.
public struct PacingController: Sendable {
    /// What the controller is told before the first packet.
    public struct Configuration: Sendable, Hashable {
        /// The window to start with (a saved tuning's, or the default).
        public var initialWindow: Int
        /// Packets the receiver can queue; nil when it did not say.
        public var receiverBuffer: Int?
        /// The receiver acknowledges every this many packets.
        public var ackInterval: Int
        /// The gap to start with, before any rate is measured.
        public var initialGap: Duration
        /// The link's connection interval where the link says it
        /// (``/BleotaLink/ConnectionIntervalControl``); nil when it does not.
        public var connectionInterval: Duration?

        public init(
            initialWindow: Int, receiverBuffer: Int?, ackInterval: Int, initialGap: Duration = .zero,
            connectionInterval: Duration? = nil
        ) {
            self.initialWindow = initialWindow
            self.receiverBuffer = receiverBuffer
            self.ackInterval = ackInterval
            self.initialGap = initialGap
            self.connectionInterval = connectionInterval
        }
    }

    /// One delivery-rate sample: packets delivered over an interval.
    public struct RateSample: Sendable, Hashable {
        public var delivered: Int
        public var interval: Duration
        /// Packets delivered (in total) when the packet that produced this sample was sent;
        /// tells the controller when a round trip has passed.
        public var deliveredAtSend: Int

        public init(delivered: Int, interval: Duration, deliveredAtSend: Int) {
            self.delivered = delivered
            self.interval = interval
            self.deliveredAtSend = deliveredAtSend
        }

        /// Packets per second.
        var rate: Double {
            let seconds = interval.seconds
            return seconds > 0 ? Double(delivered) / seconds : 0
        }
    }

    public enum Phase: String, Sendable, Hashable {
        /// Growing the flight each round while the delivery rate grows, up to the receiver's buffer.
        case startup
        /// Flight and gap follow the estimates.
        case steady
    }

    /// The largest flight the controller will allow, whatever it measures.
    public static let maximumWindow = TransferTuning.maximumWindow
    /// Startup ends when the rate grew less than 25 % for this many rounds (as BBR).
    static let flatRoundsToLeaveStartup = 3
    /// How long a delivery-rate sample counts toward the maximum: long enough to
    /// span several flash page erases, short enough to follow a link that slows.
    static let rateWindow = Duration.seconds(1)
    /// How long the shortest round trip is remembered. A BLE link's floor is its
    /// connection interval, which does not drift, so this is long.
    static let roundTripWindow = Duration.seconds(10)
    /// Flight = this × (rate × shortest round trip) + one acknowledgement interval:
    /// twice what is delivered over a round trip (room for the rate to grow, as
    /// BBR's window gain), plus the packets a receiver holds before it acknowledges.
    static let windowGain = 2.0

    public private(set) var phase = Phase.startup
    public private(set) var window: Int
    /// Time between data packets; zero sends back to back.
    public private(set) var gap: Duration
    /// Packets delivered so far (acknowledged, counted once).
    public private(set) var delivered = 0
    /// When ``delivered`` last grew.
    public private(set) var deliveredAt: Duration = .zero
    public private(set) var configuration: Configuration
    /// The first flight: the configured window within the receiver's buffer.
    public let startWindow: Int

    /// Pacing gains, one round each, in steady state (after BBR's ProbeBW cycle):
    /// a round at 5/4 finds out whether the receiver takes more than the estimate,
    /// the round after drains what that queued, six rounds cruise at 1.1 — a
    /// little above the estimate, because pacing a batched link at exactly its
    /// rate leaves some connection events part empty.
    static let probeCycle: [Double] = [1.25, 0.75, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1]
    private var cycleIndex = 2
    /// The pacing gain of the current round.
    public var pacingGain: Double { phase == .startup ? 2 : Self.probeCycle[cycleIndex] }

    /// Whether the receiver has shown that it, not the link, sets the pace: a
    /// burst lost to its full queue, or a stall (a flash erase). Until then a
    /// flight larger than its buffer goes unpaced: the link is the
    /// bottleneck and spaces the packets itself, and pacing at the measured rate
    /// would only leave connection events part empty.
    public private(set) var receiverLimited = false

    private var rates = WindowedExtremum<Double>(.maximum, window: PacingController.rateWindow)
    private var roundTrips = WindowedExtremum<Duration>(.minimum, window: PacingController.roundTripWindow)
    private var roundEnd = 0
    private var bestStartupRate = 0.0
    private var flatRounds = 0

    public init(_ configuration: Configuration) {
        self.configuration = configuration
        let buffer = configuration.receiverBuffer ?? Self.maximumWindow
        window = max(2, min(configuration.initialWindow, buffer, Self.maximumWindow))
        startWindow = window
        gap = configuration.initialGap
    }

    /// The highest delivery rate seen recently, in packets per second; nil before the first sample.
    public var deliveryRate: Double? { rates.value }

    /// The shortest round trip seen recently.
    public var shortestRoundTrip: Duration? { roundTrips.value }

    /// When the newest packet acknowledged so far was sent: the start of the
    /// flight that later packets belong to.
    public private(set) var firstSentAt: Duration = .zero

    /// What a send-time snapshot must record for ``RateSample``: the delivered
    /// count, when it last grew, and when the current flight began.
    public var snapshot: (delivered: Int, at: Duration, flightStart: Duration) { (delivered, deliveredAt, firstSentAt) }

    /// A packet is about to go out while none is in flight (the first, or the first
    /// after an idle spell): the delivery clock starts now, so the first sample
    /// does not count the idle time as delivery time.
    public mutating func sendingIdle(now: Duration) {
        deliveredAt = now
        firstSentAt = now
    }

    /// An acknowledgement arrived at `now`: `newlyDelivered` packets were confirmed,
    /// `sample` is the delivery-rate sample of the newest of them (nil if none),
    /// `roundTrip` its round trip when it was sent once.
    /// `newestSentAt` is when the newest of the acknowledged packets was sent.
    public mutating func acknowledged(
        now: Duration, newlyDelivered: Int, sample: RateSample?, roundTrip: Duration?,
        newestSentAt: Duration? = nil
    ) {
        guard newlyDelivered > 0 else { return }
        delivered += newlyDelivered
        deliveredAt = now
        if let newestSentAt { firstSentAt = newestSentAt }
        if let roundTrip, roundTrip > .zero {
            roundTrips.add(roundTrip, at: now)
        }
        if let sample, sample.interval > .zero {
            rates.add(sample.rate, at: now)
            if sample.deliveredAtSend >= roundEnd {
                roundEnd = delivered
                endRound()
            }
        }
        if phase == .startup {
            // Up to the receiver's buffer, not past it: until the receiver has shown whether it stops
            // to erase flash, whatever it cannot queue during such a stall is lost, and lost at the
            // flight's tail, where no later packet reveals it before a timeout. On slow-flash that
            // first stall cost 15 packets and 0.8 s of a 200 KiB transfer.
            window = min(Self.maximumWindow, configuration.receiverBuffer ?? Self.maximumWindow, window + newlyDelivered)
        }
        update()
    }

    /// Several packets of one flight were lost together — the signature of a
    /// receive buffer overflowing, not of radio noise.
    public mutating func burstLost() { receiverIsTheBottleneck() }

    /// The receiver stopped taking packets for a while (see ``StallPredictor``)
    /// and then went on.
    public mutating func receiverStalled() { receiverIsTheBottleneck() }

    /// Either sign that the receiver, not the link, sets the pace: startup ends,
    /// and packets beyond its buffer are paced from now on.
    private mutating func receiverIsTheBottleneck() {
        receiverLimited = true
        if phase == .startup { phase = .steady }
        update()
    }

    /// The receiver now acknowledges every `interval` packets: the flight keeps
    /// one interval's worth beyond what a round trip delivers.
    public mutating func ackIntervalChanged(to interval: Int) {
        configuration.ackInterval = max(1, interval)
        update()
    }

    /// The link's connection interval is now `interval` (a fleet shortens a link it has to
    /// itself): what one connection event may bring the receiver is counted over it.
    public mutating func connectionIntervalChanged(to interval: Duration?) {
        guard interval != configuration.connectionInterval else { return }
        configuration.connectionInterval = interval
        update()
    }

    /// The receiver stopped answering for two timeouts in a row: a blackout, not
    /// a rate. Halve the flight; the next acknowledgement's estimates set it again.
    public mutating func stalled() {
        window = max(2, window / 2)
    }

    private mutating func endRound() {
        if phase == .steady { cycleIndex = (cycleIndex + 1) % Self.probeCycle.count }
        guard phase == .startup, let rate = deliveryRate else { return }
        if rate >= bestStartupRate * 1.25 {
            bestStartupRate = rate
            flatRounds = 0
        } else {
            flatRounds += 1
            if flatRounds >= Self.flatRoundsToLeaveStartup { phase = .steady }
        }
    }

    private mutating func update() {
        guard let rate = deliveryRate, rate > 0 else { return }
        let buffer = configuration.receiverBuffer ?? Self.maximumWindow
        if phase == .steady, let floor = shortestRoundTrip {
            let target = Int((Self.windowGain * rate * floor.seconds).rounded(.up)) + configuration.ackInterval
            // Never below the starting flight: it fits the receiver's buffer, so it cannot overflow it.
            window = max(startWindow, min(Self.maximumWindow, target))
        }
        // A flight the buffer holds needs no spacing; a larger one goes at the rate the receiver
        // takes, and never more than its buffer in one connection event (``eventSpacing``).
        if window > buffer && receiverLimited {
            gap = max(.seconds(1 / (rate * pacingGain)), eventSpacing ?? .zero)
        } else {
            gap = .zero
        }
    }

    /// The gap that brings the receiver no more than its buffer of packets in one connection
    /// event; nil where the link does not say its interval.
    ///
    /// A BLE link does not deliver a paced flight as paced: the controller holds what the host
    /// writes until the next connection event and sends it there back to back, so what a device
    /// must queue is what one event brings, and pacing at a rate (a little above it, to find out
    /// whether the receiver takes more) does not bound that. Small packets make the burst short:
    /// on `slow-flash`, five 1-byte writes arrive within 2 ms at a device that takes 2 ms each and
    /// queues 4, so the last of almost every event was dropped. That is one packet, never the
    /// three in a row that say a queue overflowed (``TransferEngine``'s `overflowRun`), and a
    /// dropped write still costs the device its processing: 13 477 of 108 011 packets resent with
    /// nothing lost, and with 5 % duplication (a copy takes a place in the queue too) updates
    /// that ran for hours. What the host writes over one interval arrives in one event, so a gap
    /// of the interval over the buffer keeps each burst within the buffer. With large packets a
    /// device drains as a long event goes, the rate is the lower bound, and this binds nothing.
    var eventSpacing: Duration? {
        guard let buffer = configuration.receiverBuffer, buffer > 0, let interval = configuration.connectionInterval,
            interval > .zero
        else { return nil }
        return interval / buffer
    }
}
