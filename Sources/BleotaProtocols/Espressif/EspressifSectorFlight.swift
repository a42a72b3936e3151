/// How many sectors an Espressif host keeps ahead of the device's last sector acknowledgement.
///
/// The device announces how many sectors it takes ahead of its acknowledgements (its window),
/// but not how many packets it can queue while it writes a finished sector to flash: 85 ms on
/// `slow-flash`, during which the 4 packets its queue holds are all of the next sector it keeps.
/// A sector sent whole into that is mostly dropped, and often with its last packet, the one the
/// device answers: the host then learns of the loss only from its response timeout (2 s). So
/// the flight starts at one sector and grows by one per acknowledgement up to the announced
/// window (on a link-bound device, the window after two acknowledgements), and after a loss it
/// is one sector for the rest of the upload.
///
/// A lead into the next sector (the packets that wait in the device's queue while it writes,
/// so it goes on at once) was tried: on `slow-flash` the device takes 7 packets an event and
/// the link brings 8, so a sector that starts on a queue already holding a lead overflows it
/// at its end and loses its last packet, which costs the 2 s timeout.
///
/// `--window` fixes the flight at that many sectors; a loss halves it. A pure state machine,
/// driven by ``EspressifOTAUpdater`` and tested as a table.
struct EspressifSectorFlight: Sendable, Hashable {
    enum Phase: Sendable, Hashable {
        /// A sector more per acknowledgement, up to the announced window.
        case growing
        /// One sector at a time, after a loss.
        case settled
        /// As `--window` set it.
        case fixed
    }

    /// Sectors the device takes ahead of its acknowledgements (at least 1).
    let announcedSectors: Int
    private(set) var phase: Phase
    /// Whole sectors out beyond the last acknowledged one.
    private(set) var sectors: Int

    init(announcedSectors: Int, fixedSectors: Int? = nil) {
        self.announcedSectors = max(1, announcedSectors)
        if let fixedSectors {
            phase = .fixed
            sectors = max(1, fixedSectors)
        } else {
            phase = .growing
            sectors = 1
        }
    }

    /// A sector was acknowledged as written.
    mutating func acknowledged() {
        if phase == .growing { sectors = min(announcedSectors, sectors + 1) }
    }

    /// The device missed a packet (a sector answered with an error, or no answer in time).
    /// Returns false when the flight was one sector already: the device cannot take a sector
    /// back to back, and the caller spaces its packets instead.
    mutating func lost() -> Bool {
        switch phase {
        case .growing:
            phase = .settled
            defer { sectors = 1 }
            return sectors > 1
        case .settled:
            return false
        case .fixed:
            guard sectors > 1 else { return false }
            sectors = max(1, sectors / 2)
            return true
        }
    }
}
