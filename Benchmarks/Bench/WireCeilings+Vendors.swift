import BleotaEngine
import BleotaSimulator

/// The vendor protocols' wire ceilings: the arithmetic of "What the wire allows" in
/// `protocols/espressif-ota.md`, `suota.md`, `ti-oad.md` and `silabs-ota.md`, counted in
/// connection events as ``WireCeiling``'s Nordic ones are, each over the interval its host's
/// `UpdateReport.goodput` covers (image bytes over the transfer step's time, which each function
/// names). Each returns image bytes per second.
///
/// Two limits the Nordic arithmetic does without count here. The vendor device halves program
/// flash as each write, block or sector is taken, at the link model's page-erase time per page
/// (`DeviceEnvironment.writeTimePerByte`), on the CPU that processes the packets: the device's
/// time is processing plus programming, which the air time overlaps (`streamEvents`). And an
/// event is planned from what the host's controller holds at its start, at most `hostQueue`
/// packets (8): on `linux-bluez` (12 pairs an event) that, not the pair limit, caps writes of one
/// fragment (`queuedWritesPerEvent`). A write size a protocol leaves to the host is the best of
/// those worth trying (`writeSizes`).
/// A TI OAD block request: command, status and the block's number (`TIOADBlockRequest`).
let tiOADBlockRequestBytes = 6

extension WireCeiling {
    /// Espressif BLE OTA (protocols/espressif-ota.md, "What the wire allows"), from START to the
    /// last sector's acknowledgement: START and its answer (2 events; the sector window is in
    /// it), then 4096-byte sectors in writes of `p` bytes with a 3-byte header, the sector's CRC-16
    /// in its last (⌈(b + 2) / (p − 3)⌉ writes), at most `window` sectors beyond the last
    /// acknowledged, and the last acknowledgement 1 event after the device wrote its sector. The
    /// stream is the longer of its air time and the device's work; a window too small for the
    /// round trip (sector i + W goes in the event after sector i's acknowledgement) costs, per W
    /// sectors, one sector's stream and 1 event instead. `window`: what the device announces (the
    /// simulated ESP32's `esp-window`, 3; a legacy device's 0 is 1).
    func espressifOTA(imageBytes: Int, window: Int = 3) -> Double {
        guard imageBytes > 0 else { return 0 }
        let sector = 4096  // EspressifOTADevice.sectorSize
        let sectors = (imageBytes + sector - 1) / sector
        let first = min(sector, imageBytes)
        var best = 0.0
        for size in writeSizes(upTo: model.maximumPayload) where size > 5 {
            let data = size - 3
            var writes = 0
            // A sector's last write is short: counted as the share of an event's room it takes.
            var air = 0.0
            for index in 0..<sectors {
                let bytes = min(sector, imageBytes - index * sector) + 2
                let count = (bytes + data - 1) / data
                writes += count
                air += Double(count - 1) + writeShare(bytes - (count - 1) * data + 3, of: size)
            }
            let stream = streamEvents(writes, size: size, programming: imageBytes, airWrites: air)
            let cycle = streamEvents((first + 2 + data - 1) / data, size: size, programming: first) + 1
            let windowed = (Double(sectors) * cycle / Double(max(1, window))).rounded(.up)
            let events = 2 + max(stream + 1, windowed)
            best = max(best, Double(imageBytes) / (events * interval))
        }
        return best
    }

    /// Dialog/Renesas SUOTA over its LE credit-based channel, bleota's default where the device
    /// publishes L2CAP_PSM (protocols/suota.md, "What the wire allows"), from the read of
    /// PATCH_DATA_CHAR_SIZE to END's CMP_OK (bleota adds the verify step's time to the
    /// transfer's): MEM_DEV and IMG_STARTED (2 events), the image with SuotaLib's XOR byte in SDUs
    /// (credits hold them until the device's queue has room: none dropped), on air or as the
    /// device works, a MEM_INFO read behind the last, its answer (1), END (1) and CMP_OK (1).
    /// SDUs are not PATCH_DATA writes: any size up to what the simulator carries, MTU − 3.
    func suota(imageBytes: Int) -> Double {
        guard imageBytes > 0 else { return 0 }
        let bytes = imageBytes + 1
        var best = 0.0
        for size in writeSizes(upTo: model.maximumPayload) {
            let sdus = (bytes + size - 1) / size
            let withRead = (Double(sdus + 1) / queuedWritesPerEvent(size)).rounded(.up)
            let stream = max(withRead, streamEvents(sdus, size: size, programming: bytes))
            let events = 2 + stream + 3
            best = max(best, Double(imageBytes) / (events * interval))
        }
        return best
    }

    /// TI OAD (protocols/ti-oad.md, "What the wire allows"), from Get Block Size to
    /// OAD_DL_COMPLETE, in blocks of the size the device announces (MTU − 3 rounded down to a
    /// multiple of 4, 20…244; 4 bytes of each the block number). The preamble: Get Block Size,
    /// Image Identify and Start OAD in one event, their answers and block 0's request in the next
    /// (2). Then, with `blocksAhead` (the ceiling: `oad.c` takes any block whose number and length
    /// are the next it expects, asked for or not), the blocks on air or as the device works, and
    /// OAD_DL_COMPLETE 1 event after the last is written; without, each block on its request,
    /// the event after it, and the next request the event after the device wrote it (2 events a
    /// block, as bleota's host and TI's own send them).
    func tiOAD(imageBytes: Int, blocksAhead: Bool = true) -> Double {
        guard imageBytes > 0 else { return 0 }
        let block = min(244, max(20, model.maximumPayload / 4 * 4))  // TIOADDevice's Get Block Size
        let data = block - 4
        let blocks = (imageBytes + data - 1) / data
        var events = 2.0
        if blocksAhead {
            // Each block written is answered with the next block's request (6 bytes), which rides in
            // the reply of a later pair: where events are short (`1m-dle-7.5ms`), those replies
            // leave room for fewer blocks.
            events += streamEvents(blocks, size: block, programming: imageBytes, answeredEach: tiOADBlockRequestBytes) + 1
        } else {
            let full = imageBytes / data
            let rest = imageBytes - full * data
            events += Double(full) * (streamEvents(1, size: block, programming: data) + 1)
            if rest > 0 { events += streamEvents(1, size: rest + 4, programming: rest) + 1 }
        }
        return Double(imageBytes) / (events * interval)
    }

    /// Silicon Labs OTA DFU to the AppLoader (protocols/silabs-ota.md, "What the wire allows"),
    /// from the begin (0x00, once in the AppLoader) to 0x03's answer: 0x00 and the AppLoader's
    /// answer (2 events; data before a begin taken is WRONG_STATE), the file in writes of at most
    /// 244 bytes (MTU − 3 where less) with 0x03 behind the last, on air or as the device works (a
    /// host that sends at the device's rate: nothing acknowledges the writes, and a dropped one
    /// costs the whole file), and 0x03's answer 1 event after the device took the last write.
    func silabsOTA(imageBytes: Int) -> Double {
        guard imageBytes > 0 else { return 0 }
        var best = 0.0
        for size in writeSizes(upTo: min(244, model.maximumPayload)) {
            let writes = (imageBytes + size - 1) / size
            let withEnd = (Double(writes + 1) / queuedWritesPerEvent(size)).rounded(.up)
            let stream = max(withEnd, streamEvents(writes, size: size, programming: imageBytes))
            let events = 2 + stream + 1
            best = max(best, Double(imageBytes) / (events * interval))
        }
        return best
    }

    /// Writes of `size` bytes one event carries (``writesPerEvent(_:)``), at most the packets the
    /// host's controller holds when the event is planned (`LinkModel.hostQueue`).
    private func queuedWritesPerEvent(_ size: Int) -> Double {
        min(writesPerEvent(size), Double(max(1, model.hostQueue)))
    }

    /// Writes of `size` bytes one event carries when every pair's reply carries an answer of
    /// `answer` bytes (a device that answers each write with a notification).
    private func answeredWritesPerEvent(_ size: Int, answer: Int) -> Double {
        let central = model.fragments(bytes: size)
        let reply = model.fragments(bytes: answer).first ?? 0
        guard !central.isEmpty else { return 1 }
        var time = Duration.zero
        var pairs = 0
        while pairs < model.packetsPerEvent {
            let cost = model.pairTime(payload: central[pairs % central.count], response: reply)
            if time + cost > model.connectionInterval { break }
            time += cost
            pairs += 1
        }
        return max(1, (Double(pairs) / Double(central.count)).rounded(.down))
    }

    /// The share of an event's room a write of `bytes` takes, in writes of `size`: its fragments' share
    /// where the event's pair limit is what stops writes of `size` (`linux-bluez`: a 167-byte write is
    /// one pair of the 12, half a 495-byte one), else its air time's share.
    private func writeShare(_ bytes: Int, of size: Int) -> Double {
        let full = model.fragments(bytes: size)
        let part = model.fragments(bytes: bytes)
        guard !full.isEmpty, !part.isEmpty else { return 1 }
        let pairLimited = (writesPerEvent(size) + 1) * Double(full.count) > Double(model.packetsPerEvent)
        if pairLimited { return min(1, Double(part.count) / Double(full.count)) }
        func time(_ fragments: [Int]) -> Duration { fragments.reduce(Duration.zero) { $0 + model.pairTime(payload: $1) } }
        return min(1, time(part) / time(full))
    }

    /// Seconds a vendor device half spends programming one byte: a page erase per page written
    /// (`DeviceEnvironment.writeTimePerByte`); nothing on every preset but `slow-flash`.
    private var programmingPerByte: Double {
        model.flashPageSize > 0 ? model.flashEraseTimePerPage.seconds / Double(model.flashPageSize) : 0
    }

    /// Events `count` writes of `size` bytes take when the device programs `bytes` bytes of them:
    /// on air, or the device's processing (each write with its channel byte, as the device halves
    /// pay it) and programming, whichever is longer — ``burstEvents(_:size:)`` with the
    /// programming added and the host's queue counted.
    /// `airWrites`: the writes' share of the events' room counted in full writes, where some are
    /// shorter (``writeShare(_:of:)``); the host's queue still counts them one by one.
    private func streamEvents(_ count: Int, size: Int, programming bytes: Int, answeredEach answer: Int? = nil, airWrites: Double? = nil) -> Double {
        let perEvent = answer.map { min(queuedWritesPerEvent(size), answeredWritesPerEvent(size, answer: $0)) } ?? queuedWritesPerEvent(size)
        let queued = Double(count) / Double(max(1, model.hostQueue))
        let onAir = airWrites.map { max($0 / perEvent, queued).rounded(.up) } ?? (Double(count) / perEvent).rounded(.up)
        let work = Double(count) * model.processingTime(bytes: size + 1).seconds + Double(bytes) * programmingPerByte
        return max(onAir, (work / interval).rounded(.up))
    }
}
