import Testing

@testable import BleotaProtocols

/// The sectors an Espressif host keeps ahead of the device's acknowledgements, as a table.
@Suite struct EspressifSectorFlightTests {
    @Test func theFlightGrowsFromOneSectorToTheAnnouncedWindow() {
        var flight = EspressifSectorFlight(announcedSectors: 3)
        var seen = [flight.sectors]
        for _ in 0..<4 {
            flight.acknowledged()
            seen.append(flight.sectors)
        }
        #expect(seen == [1, 2, 3, 3, 3])
        #expect(flight.phase == .growing)
    }

    @Test func aLossWhileGrowingSettlesOnOneSectorForGood() {
        var flight = EspressifSectorFlight(announcedSectors: 3)
        flight.acknowledged()
        let shrank = flight.lost()
        #expect(shrank, "two sectors out: shrinking is the answer")
        #expect(flight.phase == .settled && flight.sectors == 1)
        for _ in 0..<10 { flight.acknowledged() }
        #expect(flight.sectors == 1)
        let shrankAgain = flight.lost()
        #expect(!shrankAgain, "one sector already: the caller spaces the packets")
    }

    @Test func theFirstSectorAloneLosingAPacketAsksForSpacing() {
        var flight = EspressifSectorFlight(announcedSectors: 3)
        let shrank = flight.lost()
        #expect(!shrank)
        #expect(flight.sectors == 1)
    }

    @Test func anExplicitWindowIsKeptAndHalvedOnLoss() {
        var flight = EspressifSectorFlight(announcedSectors: 3, fixedSectors: 8)
        flight.acknowledged()
        #expect(flight.sectors == 8)
        var shrinks: [Bool] = []
        var sizes: [Int] = []
        for _ in 0..<4 {
            shrinks.append(flight.lost())
            sizes.append(flight.sectors)
        }
        #expect(shrinks == [true, true, true, false])
        #expect(sizes == [4, 2, 1, 1])
    }

    @Test func aDeviceThatAnnouncesNoWindowGetsOneSector() {
        var flight = EspressifSectorFlight(announcedSectors: 0)
        flight.acknowledged()
        #expect(flight.sectors == 1)
    }
}
