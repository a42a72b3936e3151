import BleotaFleet
import Testing

@testable import BleotaCommands

@Suite struct FleetDisplayTests {
    /// A cell cut to the column's width ends with "…"; one that fits is left whole.
    @Test func aCutCellEndsWithAnEllipsis() {
        #expect(FleetDisplay.cut("failed at transfer: the link dropped", to: 20) == "failed at transfer:…")
        #expect(FleetDisplay.cut("failed at transfer: the link dropped", to: 20).count == 20)
        #expect(FleetDisplay.cut("updated", to: 20) == "updated")
        #expect(FleetDisplay.cut("exactly twenty chars", to: 20) == "exactly twenty chars")
    }

    /// After Ctrl-C the fleet says "stopping" once: its own note (with how to end at once), not
    /// again when the runner reports that it stopped starting devices.
    @Test func stoppingIsSaidOnce() {
        let display = FleetDisplay(devices: [], json: false, live: false)
        display.note("stopping: no new device starts; running ones finish (Ctrl-C again ends at once)")
        display.handle(.stopping)
        #expect(display.notes == ["stopping: no new device starts; running ones finish (Ctrl-C again ends at once)"])
        let quiet = FleetDisplay(devices: [], json: false, live: false)
        quiet.handle(.stopping)
        #expect(quiet.notes == ["stopping: no new device starts"])
    }
}
