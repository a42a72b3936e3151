import BleotaATT
import BleotaLink

/// The physics and device limits that decide BLE throughput and loss.
///
/// Timing follows the Bluetooth Core Specification v5.4, Vol 6, Part B: an LE
/// data packet on air is preamble (1 byte on LE 1M, 2 on LE 2M), access address
/// (4), header (2), payload (0–251) and CRC (3) at 1 or 2 Mbit/s (§2.1); each
/// packet the central sends in a connection event is answered by the
/// peripheral after T_IFS = 150 µs, and the next central packet follows 150 µs
/// after that (§4.1.1, §4.5.1). A connection event starts every connection
/// interval and may carry only so many packet pairs (the controller's limit,
/// `packetsPerEvent`) and must end before the next anchor. An upper-layer
/// packet (an ATT Write Command value of p bytes) costs p + 3 (ATT header) +
/// 4 (L2CAP header) bytes, fragmented into link-layer payloads of at most
/// `linkLayerPayload` bytes (27 without Data Length Extension, up to 251).
///
/// The device side is modelled where real devices lose data: a receive
/// queue of `deviceBuffer` packets that drains only as fast as the firmware
/// processes packets and erases flash. Packets arriving at a full queue are
/// dropped — the loss that tuning packet size, window and delay cures.
public struct LinkModel: Sendable, Hashable, Codable {
    public enum PHY: String, Sendable, Hashable, Codable {
        case le1M = "1m"
        case le2M = "2m"

        /// Air time of one byte.
        var byteTime: Duration { self == .le1M ? .microseconds(8) : .microseconds(4) }
        var preambleBytes: Int { self == .le1M ? 1 : 2 }
    }

    public var phy: PHY
    /// Link-layer payload bytes per packet: 27 without Data Length Extension, up to 251.
    public var linkLayerPayload: Int
    /// ATT MTU (23…517); an upper-layer packet carries at most MTU − 3 bytes.
    public var attMTU: Int
    /// 7.5 ms … 4 s, a multiple of 1.25 ms.
    public var connectionInterval: Duration
    /// Most packet pairs the controllers exchange per connection event.
    public var packetsPerEvent: Int
    /// Upper-layer packets the device can queue before it drops.
    public var deviceBuffer: Int
    public var deviceProcessingPerPacket: Duration
    public var deviceProcessingPerByte: Duration
    public var flashPageSize: Int
    public var flashEraseTimePerPage: Duration
    public var rebootTime: Duration
    /// Upper-layer packets the host's controller queues before `send` waits.
    public var hostQueue: Int

    public init(
        phy: PHY, linkLayerPayload: Int, attMTU: Int, connectionInterval: Duration, packetsPerEvent: Int,
        deviceBuffer: Int = 32, deviceProcessingPerPacket: Duration = .microseconds(50),
        deviceProcessingPerByte: Duration = .nanoseconds(20), flashPageSize: Int = 4096,
        flashEraseTimePerPage: Duration = .zero, rebootTime: Duration = .milliseconds(500), hostQueue: Int = 8
    ) {
        self.phy = phy
        self.linkLayerPayload = linkLayerPayload
        self.attMTU = attMTU
        self.connectionInterval = connectionInterval
        self.packetsPerEvent = packetsPerEvent
        self.deviceBuffer = deviceBuffer
        self.deviceProcessingPerPacket = deviceProcessingPerPacket
        self.deviceProcessingPerByte = deviceProcessingPerByte
        self.flashPageSize = flashPageSize
        self.flashEraseTimePerPage = flashEraseTimePerPage
        self.rebootTime = rebootTime
        self.hostQueue = hostQueue
    }

    /// Inter-frame space.
    public static let interFrameSpace = Duration.microseconds(150)
    /// ATT (3) + L2CAP (4) header bytes per upper-layer packet: what a host adds to a write
    /// before it is cut into link-layer fragments.
    public static let upperLayerOverhead = ATTLimits.writeOverhead

    /// The largest upper-layer packet: ATT MTU − 3, at most the 512 bytes an attribute value holds.
    public var maximumPayload: Int { ATTLimits.largestValue(mtu: attMTU) }

    /// Air time of one link-layer packet with `payload` bytes.
    public func airTime(payload: Int) -> Duration {
        phy.byteTime * (phy.preambleBytes + 4 + 2 + payload + 3)
    }

    /// Link-layer fragments of an upper-layer packet of `bytes` bytes.
    public func fragments(bytes: Int) -> [Int] {
        var remaining = bytes + Self.upperLayerOverhead
        var result: [Int] = []
        while remaining > 0 {
            let piece = min(remaining, linkLayerPayload)
            result.append(piece)
            remaining -= piece
        }
        return result
    }

    /// Time of one central→peripheral pair carrying `payload` bytes one way
    /// and an empty (or `response`-byte) packet back, with both IFS gaps.
    public func pairTime(payload: Int, response: Int = 0) -> Duration {
        airTime(payload: payload) + Self.interFrameSpace + airTime(payload: response) + Self.interFrameSpace
    }

    /// CPU time the device spends on one packet of `bytes` bytes.
    public func processingTime(bytes: Int) -> Duration {
        deviceProcessingPerPacket + deviceProcessingPerByte * bytes
    }

    /// The most bytes per second the device itself can take, whatever the link
    /// (`protocols/link-model.md`, "The device's ceiling"): per flash page it
    /// processes the page's packets of `packetBytes` (of which `headerBytes` are
    /// the protocol's own) and erases the page once, then idles until data
    /// comes, at least a connection interval after it is ready, less what its
    /// `B − 1` queued packets cover. Nil when the device erases nothing and
    /// spends no time per packet (the link is then the only limit).
    public func deviceCeiling(packetBytes: Int, headerBytes: Int = 0) -> Double? {
        let perPacket = processingTime(bytes: packetBytes).seconds
        guard perPacket > 0 || flashEraseTimePerPage > .zero, packetBytes > headerBytes else { return nil }
        let page = Double(flashPageSize)
        let payload = Double(packetBytes - headerBytes)
        let idle = flashEraseTimePerPage > .zero ? max(0, connectionInterval.seconds - Double(deviceBuffer - 1) * perPacket) : 0
        return page / (flashEraseTimePerPage.seconds + page / payload * perPacket + idle)
    }

    /// The most upper-layer payload bytes per second host → device with write
    /// commands of `payload` bytes and no loss: the benchmark's 100 %. Counts
    /// whole connection events: as many full fragments as fit in an event by
    /// the packet limit and by time, every event.
    public func capacity(payload: Int) -> Double { capacity(payload: payload, packetLimit: packetsPerEvent) }

    /// What the link carries at best: ``capacity(payload:)`` of its largest writes or of the writes
    /// bleota's hosts stream (`ATTLimits.fullFragmentValue(mtu:)`, whole link-layer fragments),
    /// whichever is more — on `linux-bluez` 495-byte writes, two full fragments where 512 bytes
    /// take three. The figure goodput is a share of.
    public var linkCapacity: Double {
        max(capacity(payload: maximumPayload), capacity(payload: ATTLimits.fullFragmentValue(mtu: attMTU)))
    }

    /// The payload bytes per second an adapter's radio carries when its connections keep it busy the
    /// whole interval (several links on one adapter, protocols/link-model.md): as ``capacity(payload:)``
    /// without the one link's packet limit per event. A fleet's aggregate capacity is this, per adapter.
    public func airCapacity(payload: Int) -> Double { capacity(payload: payload, packetLimit: .max) }

    private func capacity(payload: Int, packetLimit: Int) -> Double {
        let fragments = fragments(bytes: payload)
        guard !fragments.isEmpty else { return 0 }
        // Fill one event fragment by fragment, cycling through packets.
        var time = Duration.zero
        var sent = 0
        var carried = 0.0
        var index = 0
        while sent < packetLimit {
            let cost = pairTime(payload: fragments[index % fragments.count])
            if time + cost > connectionInterval { break }
            time += cost
            sent += 1
            index += 1
            if index % fragments.count == 0 { carried += Double(payload) }
        }
        // A partial packet at the end of the event continues in the next one.
        let partial = Double(index % fragments.count) / Double(fragments.count) * Double(payload)
        return (carried + partial) / connectionInterval.seconds
    }

    /// Checks ranges; the message names the allowed range.
    public func validate() throws(SimulatorAddressError) {
        func check(_ ok: Bool, _ message: String) throws(SimulatorAddressError) {
            if !ok { throw SimulatorAddressError(message) }
        }
        try check((27...251).contains(linkLayerPayload), "dle \(linkLayerPayload) is out of range: use 27…251")
        try check((23...517).contains(attMTU), "mtu \(attMTU) is out of range: use 23…517")
        let micros = connectionInterval.components.seconds * 1_000_000 + connectionInterval.components.attoseconds / 1_000_000_000_000
        try check(
            LEConnectionInterval.allowed.contains(connectionInterval) && micros % 1250 == 0,
            "interval \(Double(micros) / 1000) ms is out of range: use 7.5…4000 ms in steps of 1.25 ms")
        try check((1...64).contains(packetsPerEvent), "per-event \(packetsPerEvent) is out of range: use 1…64")
        try check((1...1024).contains(deviceBuffer), "buffer \(deviceBuffer) is out of range: use 1…1024")
        try check(deviceProcessingPerPacket >= .zero && flashEraseTimePerPage >= .zero, "device times cannot be negative")
    }
}

extension Duration {
    var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}

/// Faults a simulated link injects, each seeded.
public struct LinkFaults: Sendable, Hashable, Codable {
    /// Probability a host → device packet is lost.
    public var writeLoss = 0.0
    /// Probability a device → host packet (a notification) is lost.
    public var notificationLoss = 0.0
    /// Probability a packet arrives with one bit flipped.
    public var corruption = 0.0
    /// Probability a packet is delivered twice.
    public var duplication = 0.0
    /// Drop the link once after this many host → device bytes.
    public var disconnectAfterBytes: Int?
    /// Drop the link once at this virtual time.
    public var disconnectAtTime: Duration?
    /// Per-packet probability the link drops.
    public var disconnectProbability = 0.0
    /// Cut the device's power once after this many host → device bytes (RAM lost, flash kept).
    public var powerLossAfterBytes: Int?
    /// Reboot the device once after this many host → device bytes.
    public var rebootAfterBytes: Int?

    public init() {}
}

extension LinkModel: CustomStringConvertible {
    /// What a log line says of the model, in the units the address keys take
    /// (`SimulatorAddress.simulatorKeys`), not Swift's rendering of the struct.
    public var description: String {
        func milliseconds(_ duration: Duration) -> String {
            let value = duration.seconds * 1000
            return value == value.rounded() ? "\(Int(value)) ms" : String(format: "%g ms", value)
        }
        var parts = [
            "LE \(phy.rawValue.uppercased())", "link-layer payload \(linkLayerPayload)", "MTU \(attMTU)",
            "\(milliseconds(connectionInterval)) interval", "\(packetsPerEvent) packets per event",
            "device buffer \(deviceBuffer)", "\(milliseconds(deviceProcessingPerPacket)) per packet",
        ]
        if flashEraseTimePerPage > .zero { parts.append("\(flashPageSize)-byte pages erased in \(milliseconds(flashEraseTimePerPage))") }
        parts.append("reboot \(milliseconds(rebootTime))")
        return parts.joined(separator: ", ")
    }
}
