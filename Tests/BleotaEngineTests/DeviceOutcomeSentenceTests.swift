import BleotaEngine
import Testing

/// An old image its protocol cannot name is said once, not "its old image (its old image)" (issue 48, item 17).
@Suite struct DeviceOutcomeSentenceTests {
    @Test func anUnnamedOldImageIsSaidOnce() {
        #expect(DeviceOutcome.oldImage(DeviceOutcome.unnamedOldImage).sentence == "the device still runs its old image")
        #expect(DeviceOutcome.oldImage("1.0.0").sentence == "the device still runs its old image (1.0.0)")
    }
}
