import BleotaSimulator

/// What a protocol's wire allows on a simulated link: the arithmetic of `protocols/*.md`
/// ("What the wire allows"), counted in the link model's connection events.
///
/// The link model plans each connection event at its start (`protocols/link-model.md`), so
/// whatever the host decides on an answer that came in one event goes in the next, and an
/// answer to a request that reached the device in one event comes in the next: a request the
/// host can only send once it has an answer costs two events, a burst of `n` writes
/// ⌈n / k⌉ events at `k` writes an event, and the receipt after a burst's last write one
/// event more. A device slower than its link stretches a burst to the time it needs, and an
/// erase stretches the answer that waits for it. A write size the protocol leaves to the host is
/// the best of those worth trying (``writeSizes(upTo:)``): each function takes `writeSize` nil for that.
struct WireCeiling {
    let model: LinkModel

    var interval: Double { model.connectionInterval.seconds }

    /// Writes of `size` bytes one event carries.
    func writesPerEvent(_ size: Int) -> Double {
        max(1, (model.capacity(payload: size) * interval / Double(size)).rounded(.down))
    }

    /// Events `count` writes of `size` bytes take, with the device's processing of them.
    func burstEvents(_ count: Int, size: Int) -> Double {
        let onAir = (Double(count) / writesPerEvent(size)).rounded(.up)
        let processing = (Double(count) * model.processingTime(bytes: size).seconds / interval).rounded(.up)
        return max(onAir, processing)
    }

    /// Write sizes worth trying up to `limit`: `limit`, and each below it that fills whole
    /// link-layer fragments (n × DLE − 7). On `linux-bluez` a 512-byte write is three fragments
    /// (251, 251, 17) and 12 pairs carry 4 of them; 495 bytes are two full fragments, 6 an event.
    /// (bleota's hosts stream writes of `ATTLimits.fullFragmentValue(mtu:)`, 495 at MTU 517.)
    func writeSizes(upTo limit: Int) -> [Int] {
        var sizes = [limit]
        var fragments = 1
        while fragments * model.linkLayerPayload - LinkModel.upperLayerOverhead < limit {
            sizes.append(fragments * model.linkLayerPayload - LinkModel.upperLayerOverhead)
            fragments += 1
        }
        return sizes
    }

    /// The best of `rate` over the write sizes worth trying up to the link's largest write.
    func bestOfWriteSizes(_ rate: (Int) -> Double) -> Double {
        writeSizes(upTo: model.maximumPayload).map(rate).max() ?? 0
    }

    /// Events an erase of `pages` pages adds to the answer that waits for it.
    func eraseEvents(pages: Int) -> Double {
        (Double(pages) * model.flashEraseTimePerPage.seconds / interval).rounded(.up)
    }

    /// Nordic Secure DFU (protocols/nordic-dfu.md): objects of 4 KiB, one at a time. Per object,
    /// waiting for every answer (`pipelined` false): Create and its answer (2 events, and the
    /// erase), the packets, the receipt that is the object's checksum (1), Execute and its answer
    /// (2). With requests ahead of their answers as far as ATT lets them go (`pipelined`): the
    /// Create and the packets together, the receipt (1), the Execute (1) and its Write Response
    /// (1), since ATT lets one request out at a time and the next Create waits for it; where the
    /// device's queue (`deviceBuffer`) cannot hold the object's packets behind an erasing Create
    /// (`slow-flash`: 4), B − 1 of them wait there and the rest follow its answer. The Execute
    /// cannot go earlier — only the receipt says the object is whole, and an executed object
    /// cannot be taken back — nor the Create before the Execute, which would drop the object. So
    /// an Execute sent ahead of the next Create gains nothing over waiting for its answer where
    /// the bootloader answers at once: both take the event after the Execute crossed. Besides:
    /// the init packet (Set PRN, Select, Create, its packet, Calculate Checksum, Execute, Set PRN,
    /// Select: 8 round trips), the 400 ms pause before the first object, and the last Execute's
    /// answer, which waits for the whole image's hash.
    func nordicSecureDFU(imageBytes: Int, pipelined: Bool, firstObjectDelay: Double = 0.4, writeSize: Int? = nil) -> Double {
        guard let writeSize else {
            return bestOfWriteSizes { nordicSecureDFU(imageBytes: imageBytes, pipelined: pipelined, firstObjectDelay: firstObjectDelay, writeSize: $0) }
        }
        // The whole ATT value is the packet's (the simulator's channel tag rides outside it, as
        // GATTChannelLink's never goes on air): 244 bytes at MTU 247, 20 at 23.
        let packet = writeSize
        let object = 4096
        let objects = (imageBytes + object - 1) / object
        var events = 0.0
        for index in 0..<objects {
            let bytes = min(object, imageBytes - index * object)
            let packets = (bytes + packet - 1) / packet
            let erase = eraseEvents(pages: 1)
            if pipelined, index > 0, erase > 0, packets + 1 > model.deviceBuffer {
                // A device queue shorter than the object: what waits behind the Create while it
                // erases is B − 1 packets; the rest go once its answer says the erase is over.
                events += 2 + erase + burstEvents(packets - (model.deviceBuffer - 1), size: packet) + 1 + 2
            } else if pipelined, index > 0 {
                // The erase overlaps the packets' flight: only what outlasts them shows.
                events += max(burstEvents(packets + 1, size: packet), erase + burstEvents(packets, size: packet)) + 1 + 2
            } else {
                events += 2 + erase + burstEvents(packets, size: packet) + 1 + 2
            }
        }
        events += 8 * 2
        return Double(imageBytes) / (events * interval + firstObjectDelay)
    }

    /// Nordic legacy DFU (protocols/nordic-legacy-dfu.md): Start answered once the bank is erased
    /// (2 events and the erase), the init packet and its answer (3: Initialize Parameters 00 and the
    /// packet, then 01, a Write Request held for 00's Write Response, then the answer), Set PRN and
    /// Receive Firmware (2: Receive Firmware, a request too, waits for Set PRN's response; the image's
    /// writes, commands, follow it at once), then the image in writes of a multiple of 4 bytes with a
    /// receipt every `receiptInterval` writes, Validate (2) and Activate (1). Waiting for each
    /// receipt (`pipelined` false), a group of writes costs its burst and the receipt's event;
    /// with one group always in flight beyond the last receipt, the writes follow each other and
    /// only the device's processing or the link limits them.
    func nordicLegacyDFU(imageBytes: Int, receiptInterval: Int = 10, pipelined: Bool, writeSize: Int? = nil) -> Double {
        guard let writeSize else {
            return bestOfWriteSizes { nordicLegacyDFU(imageBytes: imageBytes, receiptInterval: receiptInterval, pipelined: pipelined, writeSize: $0) }
        }
        let packet = writeSize / 4 * 4
        let writes = (imageBytes + packet - 1) / packet
        let pages = (imageBytes + model.flashPageSize - 1) / model.flashPageSize
        var events = 2 + eraseEvents(pages: pages) + 3 + 2 + 2 + 1
        if pipelined || receiptInterval == 0 {
            events += burstEvents(writes, size: packet) + 1
        } else {
            let groups = writes / receiptInterval
            events += Double(groups) * (burstEvents(receiptInterval, size: packet) + 1)
            events += burstEvents(writes - groups * receiptInterval, size: packet) + 1
        }
        return Double(imageBytes) / (events * interval)
    }
}
