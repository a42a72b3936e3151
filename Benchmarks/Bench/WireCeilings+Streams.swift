import BleotaCodec
import BleotaEngine
import BleotaProtocols
import BleotaSimulator

/// How a described protocol's host paces its packets, for ``WireCeiling/described(_:imageBytes:pacing:)``.
enum DescribedPacing: Hashable {
    /// As the description says: flow `none` with its read every N packets (or none at all), flow
    /// `ack` with the host's window of two acknowledgement intervals, flow `request` as the device asks.
    case asDescribed
    /// Flow `none` with a read every `n` packets instead (what `--window n` asks of bleota's host).
    case readEvery(Int)
    /// Flow `none` without reads: in each connection event as many packets as the device's queue
    /// takes as they arrive and the device finishes before the next event (what a `--delay` matched
    /// to the device gives). The most the wire allows: nothing in it tells the host the device's pace.
    case spacedToTheDevice
}

/// The streaming protocols' wire ceilings: the arithmetic of "What the wire allows" in
/// `protocols/bleota.md`, `smp.md`, `stm32wb-ota.md`, `telink-ota.md` and
/// `description-format.md`, counted in connection events as ``WireCeiling``'s Nordic ones are,
/// over the interval `UpdateReport.goodput` covers for each host (named in each function).
/// Each returns image bytes per second.
///
/// What these protocols add to the Nordic arithmetic: long streams of writes whose events an
/// answer can shorten (an answer riding in an event costs it a write where the event has no time
/// to spare: `1m-dle-7.5ms`), the host's controller taking at most `hostQueue` packets an event,
/// and devices slower than their link. Such a device is idle after each pause (an erase, a
/// request's flash write) until the host has seen its answer: the answer leaves at the first
/// anchor after the pause, and the host's next data arrives one interval and the first write's
/// air time after that anchor, so those cycles lock to the anchors and count in whole events.
extension WireCeiling {
    // MARK: - bleota's native protocol

    /// bleota's native protocol (protocols/bleota.md, "What the wire allows"), from START to the
    /// acknowledgement that completes the stream: what `UpdateReport.goodput` covers for it (the
    /// transfer's `TransferSummary.elapsed`, START's request and the engine's run; not HELLO,
    /// VERIFY or ACTIVATE).
    ///
    /// DATA packets of the link's largest write `p` (MTU − 3, at most 512) carry `p − 5` image
    /// bytes (`p − 1` with compact headers, which bleota's host asks for where `p ≤ 64`). START and
    /// its answer take 2 events, the packets ⌈(N + A·d) / k⌉, and the last acknowledgement 1 more:
    /// `A` acknowledgements inside the stream, each displacing `d` packets from its event (1 on
    /// `1m-dle-7.5ms`, whose three 244-byte writes leave 96 µs and a 6-byte ACK takes 104, 0
    /// elsewhere). `ackInterval` nil counts only the last: the receiver may be asked to acknowledge
    /// every 65 535 packets, so the wire's ceiling has none in the stream; give
    /// ``TransferEngine/linkBoundAckInterval`` for what bleota asks once pacing knows the link.
    ///
    /// A device that erases flash sets the pace instead. Page k's erase starts with the packet
    /// holding its first byte, `s_k = ⌊4096·k / P⌋`; `B − 1` packets wait in the device's queue
    /// meanwhile; the host learns the erase is over only from an acknowledgement, which leaves at
    /// the next anchor, and its data arrives `I + a₁` after that anchor. From that acknowledgement
    /// to the next erase's: ⌈(I + a₁ + (s_{k+1} − s_k − (B − 1))·t + t_e) / I⌉ events, 9 on
    /// `slow-flash` (135 ms a page). Where the queue bridges the trip (`(B − 1)·t ≥ I + a₁`), or
    /// with `predictingErases` (a host that times its packets to each erase's end without waiting
    /// for the acknowledgement, which the wire permits), the device works without idling:
    /// `N·t + pages·t_e`.
    func native(imageBytes: Int, ackInterval: Int? = nil, predictingErases: Bool = false, writeSize: Int? = nil) -> Double {
        guard imageBytes > 0 else { return 0 }
        guard let size = writeSize else {
            return bestOfWriteSizes { native(imageBytes: imageBytes, ackInterval: ackInterval, predictingErases: predictingErases, writeSize: $0) }
        }
        let header = size <= NativeUpdater.compactDataLinkPayload ? NativeMessage.CompactData.headerSize : NativeMessage.dataHeaderSize
        let payload = size - header
        guard payload > 0 else { return 0 }
        let packets = (imageBytes + payload - 1) / payload
        let perEvent = streamWritesPerEvent(size)
        let inStream = ackInterval.map { (packets - 1) / max(1, $0) } ?? 0
        let displaced = Double(inStream) * displacedWrites(size, byAnswer: Self.nativeAcknowledgementBytes)
        let onAir = eventsFor(writes: Double(packets) + displaced, perEvent: perEvent)
        let work = model.processingTime(bytes: size).seconds
        let erase = model.flashEraseTimePerPage.seconds
        let pages = model.flashPageSize > 0 ? (imageBytes + model.flashPageSize - 1) / model.flashPageSize : 0
        let arrival = firstWriteArrival(size)
        let queued = max(0, model.deviceBuffer - 1)
        if erase > 0, pages > 0, !predictingErases, Double(queued) * work < interval + arrival {
            func trigger(_ page: Int) -> Int { page * model.flashPageSize / payload }
            /// The device's time on `count` packets that arrive after its idle spell: its work, or the link's.
            func burst(_ count: Int) -> Double {
                let waiting = Double(max(0, count))
                return max(waiting * work, waiting / perEvent * interval)
            }
            // The event that carries the acknowledgement after page 0's erase: START and its answer,
            // then packet 0 (first in its event), its processing and the erase.
            var events = 2 + eventsSpanning(arrival + work + erase)
            for page in 1..<pages {
                events += eventsSpanning(interval + arrival + burst(trigger(page) - trigger(page - 1) - queued) + erase)
            }
            // The packets after the last page's erase that its queue did not hold, and the last acknowledgement.
            let tail = packets - 1 - trigger(pages - 1) - queued
            if tail > 0 { events += eventsSpanning(interval + arrival + burst(tail)) }
            return Double(imageBytes) / ((events + 1) * interval)
        }
        let device = Double(packets) * work + (erase > 0 ? Double(pages) * erase : 0)
        return Double(imageBytes) / ((2 + max(onAir, eventsSpanning(device)) + 1) * interval)
    }

    /// A native ACK with nothing missing: opcode, next expected, the empty bitmap's length, CRC-16.
    private static let nativeAcknowledgementBytes = 6

    // MARK: - MCUmgr SMP

    /// MCUmgr SMP image upload (protocols/smp.md, "What the wire allows"), from the first upload
    /// request to the last answer: what `UpdateReport.goodput` covers for it
    /// (`SMPUpdater.upload`'s elapsed time; not the parameters, the slot list or the marks).
    ///
    /// Requests as bleota's host sizes them (`SMPUpdater.uploadConfiguration`): the device's
    /// `buf_size` (`bufferSize`, header included) cut to whole link packets less 8 bytes, data after
    /// 8 header bytes and the CBOR map (26 bytes with a 5-byte offset; the first request 85, with
    /// `image`, `len`, `sha`, `upgrade`), `u = ⌈q / p⌉` writes each, one 18-byte answer each.
    ///
    /// One at a time (`window` 1): per request 1 + max(⌈u / k⌉, ⌈(a₁ + D) / I⌉) events — its writes,
    /// or the device's work `D` on them (each write's processing, then the flash write of its data
    /// at the link model's erase time per page), then its answer's event; the next request follows.
    /// `W` in flight (default `bufferCount − 1`): the first request alone (bleota's host waits for
    /// where the device stands), then per request max((u + δ) / k, D / I, that cycle / W) events,
    /// `δ` the writes its answer displaces, and 1 for the last answer. A device slower per write than
    /// the link whose queue (`deviceBuffer`, in writes) cannot hold the window's writes loses writes
    /// pipelined that way; what it takes without loss is the next request's first `B − 1` writes
    /// queued behind each request and the rest after its answer: 1 + max(⌈u / k⌉,
    /// ⌈(a₁ + D − (B − 1)·t) / I⌉) events a request (6 on `slow-flash`, as one at a time).
    func smpUpload(imageBytes: Int, window: Int? = nil, bufferSize: Int = 2475, bufferCount: Int = 4, writeSize: Int? = nil) -> Double {
        guard imageBytes > 0 else { return 0 }
        guard let size = writeSize else {
            return bestOfWriteSizes { smpUpload(imageBytes: imageBytes, window: window, bufferSize: bufferSize, bufferCount: bufferCount, writeSize: $0) }
        }
        var within = bufferSize
        if size < within { within = within / size * size - min(8, size / 8) }
        let chunk = max(1, SMPUploadRequest.dataCapacity(within: within, maximumOffset: imageBytes, first: false))
        let firstChunk = max(1, SMPUploadRequest.dataCapacity(within: within, maximumOffset: imageBytes, first: true))
        var requests: [(data: Int, first: Bool)] = [(data: min(imageBytes, max(min(32, imageBytes), firstChunk)), first: true)]
        var left = imageBytes - requests[0].data
        while left > 0 {
            let data = min(chunk, left)
            requests.append((data: data, first: false))
            left -= data
        }
        let answer = SMPHeader.size + SMPUploadResponse(offset: imageBytes).body.encode().count
        let perEvent = streamWritesPerEvent(size)
        let displaced = displacedWrites(size, byAnswer: answer)
        let arrival = firstWriteArrival(size)
        let perWrite = model.processingTime(bytes: size).seconds
        let perByte = flashWritePerByte
        func bytes(_ request: (data: Int, first: Bool)) -> Int {
            request.data + SMPUploadRequest.overhead(dataSize: request.data, maximumOffset: imageBytes, first: request.first)
        }
        func writes(_ request: (data: Int, first: Bool)) -> Int { (bytes(request) + size - 1) / size }
        func work(_ request: (data: Int, first: Bool)) -> Double {
            let count = writes(request)
            let last = bytes(request) - (count - 1) * size
            return Double(count - 1) * perWrite + model.processingTime(bytes: last).seconds + Double(request.data) * perByte
        }
        /// From a request's first write to the next request's, the next sent on its answer; `queued`
        /// of its writes already waited in the device's queue.
        func alone(_ request: (data: Int, first: Bool), queued: Int) -> Double {
            1 + max(eventsFor(writes: Double(writes(request)), perEvent: perEvent), eventsSpanning(arrival + work(request) - Double(queued) * perWrite))
        }
        let inFlight = max(1, window ?? (bufferCount - 1))
        if inFlight == 1 {
            return Double(imageBytes) / (requests.reduce(0.0) { $0 + alone($1, queued: 0) } * interval)
        }
        var events = alone(requests[0], queued: 0)
        let rest = requests.dropFirst()
        if let typical = rest.first {
            let floods = perWrite > interval / perEvent && inFlight * writes(typical) > model.deviceBuffer
            if floods {
                events += rest.reduce(0.0) { $0 + alone($1, queued: min(model.deviceBuffer - 1, writes($1))) }
            } else {
                let stream = rest.reduce(0.0) { sum, request in
                    sum + max((Double(writes(request)) + displaced) / perEvent, work(request) / interval, alone(request, queued: 0) / Double(inFlight))
                }
                events += eventsFor(writes: stream, perEvent: 1) + 1
            }
        }
        return Double(imageBytes) / (events * interval)
    }

    // MARK: - Described protocols

    /// A protocol described in a file (protocols/description-format.md, "What the wire allows";
    /// `stm32wb-ota.md` and `telink-ota.md` for the two that ship), from the start command to the
    /// end command's answer: what `UpdateReport.goodput` covers for it (`DescribedUpdater`'s
    /// transfer time; not the jump to the bootloader, the activation or the device's return). Nil
    /// when that pacing loses packets on this link — a burst finds the device's queue full, which a
    /// `gap: fail` device answers by failing the upload — or does not apply to the flow.
    ///
    /// Packets of the description's payload (or what the link carries: MTU − 3 less the packet's own
    /// fields), each costing the device its processing (with the channel byte) and the flash write of
    /// its image bytes at the link model's erase time per page. Flow `none`: the start (when it has no
    /// answer), the packets and the end in one stream, at most `k` an event (the link's, and
    /// `hostQueue`), the end's answer 1 event after the device took it; with a read every `r` packets,
    /// per group the packets and the read, and the read's answer, 1 event after the device took the
    /// read: max(⌈(r + 1) / k⌉, ⌈(a₁ + r·t + t_r) / I⌉) + 1 events, then the end and its answer (2).
    /// Flow `ack`: units of `every` packets under a window of two, as SMP's requests are. Flow
    /// `request`: per request the device's request event, then its packets.
    ///
    /// The bench gets the description as `bleota flash --protocol-file` does:
    /// `try ProtocolDescription(contentsOf: "protocols/telink-ota.yaml")`, or the `description` of
    /// the `DescribedProtocol` that `benchmarkProtocol(named:)` returns.
    func described(_ description: ProtocolDescription, imageBytes: Int, pacing: DescribedPacing = .asDescribed, writeSize: Int? = nil) -> Double? {
        guard imageBytes > 0 else { return 0 }
        let transfer = description.transfer
        guard let writeSize else {
            if transfer.payloadSize != nil { return described(description, imageBytes: imageBytes, pacing: pacing, writeSize: model.maximumPayload) }
            return writeSizes(upTo: model.maximumPayload).compactMap { described(description, imageBytes: imageBytes, pacing: pacing, writeSize: $0) }.max()
        }
        let packet = description.message(transfer.packet)
        let payload = transfer.payloadSize ?? (writeSize - packet.overhead)
        guard payload > 0 else { return nil }
        let align = max(1, description.image.align)
        let sent = (imageBytes + align - 1) / align * align
        let count = (sent + payload - 1) / payload
        let size = packet.overhead + payload
        let perEvent = max(1, Int(streamWritesPerEvent(size).rounded(.down)))
        let arrival = firstWriteArrival(size)
        // DescribedDevice: the processing of the framed packet (its channel byte, which costs no air
        // time, included), then the flash write of the packet's image bytes.
        let data = QueuedWrite(size: size, cost: model.processingTime(bytes: size + 1).seconds + Double(payload) * flashWritePerByte)
        func command(_ name: String) -> QueuedWrite {
            let bytes = description.message(name).overhead
            return QueuedWrite(size: bytes, cost: model.processingTime(bytes: bytes + 1).seconds)
        }
        // A read on the simulated link: the read marker and the channel (the marker as its channel byte).
        let read = QueuedWrite(size: 1, cost: model.processingTime(bytes: 2).seconds)
        let start = description.update.start
        let before: Double = start?.answer != nil ? 2 : 0
        var leading: [QueuedWrite] = []
        if let start, start.answer == nil { leading.append(command(start.send)) }
        let end = command(description.update.end.send)
        let endAnswer: Double = description.update.end.answer != nil ? 1 : 0
        func rate(_ events: Double) -> Double { Double(imageBytes) / (events * interval) }
        // A device that holds its link loses nothing to its queue: what it has no room for waits on air.
        let held = transfer.whenQueueFull == .hold

        switch transfer.flow {
        case .none(let describedEvery, _):
            let every: Int?
            switch pacing {
            case .asDescribed: every = describedEvery
            case .readEvery(let n): every = max(1, n)
            case .spacedToTheDevice: every = nil
            }
            guard let every else {
                let stream = leading + Array(repeating: data, count: count) + [end]
                for writes in stride(from: perEvent, through: 1, by: -1) {
                    let run = deviceQueueRun(stream, perEvent: writes, held: held)
                    if !run.overflow { return rate(before + eventsSpanning(run.finish) + endAnswer) }
                    // Back to back is all a host without reads does on its own.
                    if pacing != .spacedToTheDevice { return nil }
                }
                return nil
            }
            var events = before
            var left = count
            var ahead = leading
            while left > 0 {
                let group = min(every, left)
                left -= group
                let run = deviceQueueRun(ahead + Array(repeating: data, count: group) + [read], perEvent: perEvent, held: held)
                if run.overflow { return nil }
                events += eventsSpanning(run.finish) + 1
                ahead = []
            }
            // The end after the last read's answer, and its own answer.
            return rate(events + 1 + endAnswer)

        case .acknowledged(let ack, let every):
            guard pacing == .asDescribed else { return nil }
            let unit = Double(max(1, every))
            // DescribedUpdater's window: two acknowledgement intervals of packets.
            if data.cost > interval / Double(perEvent), 2 * max(1, every) > model.deviceBuffer { return nil }
            let alone = 1 + max(eventsFor(writes: unit, perEvent: Double(perEvent)), eventsSpanning(arrival + unit * data.cost))
            let perUnit = max(
                (unit + displacedWrites(size, byAnswer: description.message(ack).overhead)) / Double(perEvent),
                unit * data.cost / interval, alone / 2)
            let stream = eventsFor(writes: Double(count) / unit * perUnit + Double(leading.count) / Double(perEvent), perEvent: 1)
            // The acknowledgement of the last packets, the end, and its answer.
            return rate(before + stream + 2 + endAnswer)

        case .requested(let request):
            guard pacing == .asDescribed else { return nil }
            // DescribedDevice asks for 8 packets when its request carries a count, else 1.
            let asked = description.message(request).variables.contains("count") ? 8 : 1
            if deviceQueueRun(Array(repeating: data, count: asked), perEvent: perEvent, held: held).overflow { return nil }
            let requests = (count + asked - 1) / asked
            let cycle = 1 + max(eventsFor(writes: Double(asked), perEvent: Double(perEvent)), eventsSpanning(arrival + Double(asked) * data.cost))
            let last = count - (requests - 1) * asked
            // The last packets with the end behind them (the device asks for nothing more), its answer.
            let tail = max(
                eventsFor(writes: Double(last + 1), perEvent: Double(perEvent)),
                eventsSpanning(arrival + Double(last) * data.cost + end.cost))
            // The start, and the device's first request in the event after it.
            return rate(2 + Double(requests - 1) * cycle + tail + endAnswer)
        }
    }

    // MARK: - Helpers

    /// Writes of `size` bytes one event of a stream carries — a fraction when the last one's
    /// fragments go on in the next event — with the device's answer of `answer` bytes in the event's
    /// first pairs when given; at most `hostQueue`: the host's controller holds that many packets
    /// when an event is planned, which on `linux-bluez` (12 pairs) caps writes of one fragment at 8.
    private func streamWritesPerEvent(_ size: Int, answer: Int? = nil) -> Double {
        let central = model.fragments(bytes: size)
        guard !central.isEmpty else { return 1 }
        var back = answer.map { model.fragments(bytes: $0) } ?? []
        var time = Duration.zero
        var pairs = 0
        while pairs < model.packetsPerEvent {
            let response = back.isEmpty ? 0 : back.removeFirst()
            let cost = model.pairTime(payload: central[pairs % central.count], response: response)
            if time + cost > model.connectionInterval { break }
            time += cost
            pairs += 1
        }
        let carried = Double(pairs) / Double(central.count)
        return max(1 / Double(central.count), min(carried, Double(max(1, model.hostQueue))))
    }

    /// Writes of `size` bytes that an answer of `answer` bytes riding in an event costs it.
    private func displacedWrites(_ size: Int, byAnswer answer: Int) -> Double {
        max(0, streamWritesPerEvent(size) - streamWritesPerEvent(size, answer: answer))
    }

    /// When the first write of `size` bytes in an event has crossed, after the anchor: its last
    /// fragment's end, when the device starts on it.
    private func firstWriteArrival(_ size: Int) -> Double {
        let fragments = model.fragments(bytes: size)
        let before = fragments.dropLast().reduce(0.0) { $0 + model.pairTime(payload: $1).seconds }
        return before + model.airTime(payload: fragments.last ?? 0).seconds
    }

    /// Connection events from an anchor to the first anchor at or after `seconds`: the index of the
    /// event that carries what the device sends at that moment.
    private func eventsSpanning(_ seconds: Double) -> Double {
        max(0, (seconds / interval - 1e-9).rounded(.up))
    }

    /// Whole events `writes` take at `perEvent` an event.
    private func eventsFor(writes: Double, perEvent: Double) -> Double {
        max(0, (writes / max(perEvent, 1e-9) - 1e-9).rounded(.up))
    }

    /// Seconds a device half spends writing one byte to flash: a page erase per page written
    /// (`DeviceEnvironment.writeTimePerByte`); nothing on every preset but `slow-flash`. The native
    /// device pays erases instead (per page, when data first reaches it).
    private var flashWritePerByte: Double {
        model.flashPageSize > 0 ? model.flashEraseTimePerPage.seconds / Double(model.flashPageSize) : 0
    }

    /// One packet for ``deviceQueueRun(_:perEvent:)``: its bytes on air (a channel byte excluded)
    /// and the device's time on it.
    private struct QueuedWrite {
        var size: Int
        var cost: Double
    }

    /// `writes` sent `perEvent` an event from an anchor (time 0), through the device's queue of
    /// `deviceBuffer` packets first in, first out: when the device is done with the last, and whether
    /// any found the queue full (a packet waiting or being worked on holds its slot until done).
    /// `held`: a device whose link holds what it has no room for (`FullQueueHandling.hold`): a
    /// write that finds no place is refused a pair at a time, each pair its first fragment's air
    /// time, until one frees, as the simulated link does (in a later event when the event's time or
    /// pairs run out); nothing overflows.
    private func deviceQueueRun(_ writes: [QueuedWrite], perEvent: Int, held: Bool = false) -> (finish: Double, overflow: Bool) {
        let limit = max(1, perEvent)
        var busy: [Double] = []
        var finish = 0.0
        var overflow = false
        var event = 0
        var inEvent = 0
        var pairsInEvent = 0
        var offset = 0.0
        func nextEvent() {
            event += 1
            inEvent = 0
            pairsInEvent = 0
            offset = 0
        }
        for write in writes {
            if inEvent == limit { nextEvent() }
            let fragments = model.fragments(bytes: write.size)
            let pairs: [Double] = fragments.map { model.pairTime(payload: $0).seconds }
            let earlierFragments: Double = pairs.dropLast().reduce(0.0, +)
            let lastFragment: Double = model.airTime(payload: fragments.last ?? 0).seconds
            if held {
                // Refused pairs until a place is free when the write would start.
                while true {
                    let start = Double(event) * interval + offset
                    busy.removeAll { $0 <= start }
                    if busy.count < model.deviceBuffer { break }
                    let refused = pairs.first ?? 0
                    if offset + refused > interval || pairsInEvent + 1 > model.packetsPerEvent {
                        nextEvent()
                    } else {
                        offset += refused
                        pairsInEvent += 1
                    }
                }
            }
            let arrival = Double(event) * interval + offset + earlierFragments + lastFragment
            offset += pairs.reduce(0.0, +)
            pairsInEvent += fragments.count
            inEvent += 1
            busy.removeAll { $0 <= arrival }
            guard held || busy.count < model.deviceBuffer else {
                overflow = true
                continue
            }
            finish = max(arrival, finish) + write.cost
            busy.append(finish)
        }
        return (finish, overflow)
    }
}
