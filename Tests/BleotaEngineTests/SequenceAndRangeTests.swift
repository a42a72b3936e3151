import Testing

@testable import BleotaEngine

@Suite struct SequenceNumberTests {
    @Test(arguments: [0, 1, 100, 32_767, 65_535, 65_536, 65_537, 131_071, 1_000_000])
    func unwrapRecoversIndexNearReference(index: Int) {
        for offset in [-250, -1, 0, 1, 250, 1000] {
            let reference = max(0, index + offset)
            #expect(SequenceNumber.unwrap(SequenceNumber.wrap(index), near: reference) == index)
        }
    }

    @Test func wrapKeepsLow16Bits() {
        #expect(SequenceNumber.wrap(65_536 + 5) == 5)
        #expect(SequenceNumber.wrap(65_535) == 0xFFFF)
    }
}

@Suite struct RangeSetTests {
    @Test func mergesOverlappingAndAdjacentRanges() {
        var set = RangeSet()
        set.insert(10..<20)
        set.insert(30..<40)
        set.insert(20..<25)
        #expect(set.ranges == [10..<25, 30..<40])
        set.insert(0..<100)
        #expect(set.ranges == [0..<100])
        #expect(set.count == 100)
    }

    @Test func insertsInOrderAndIgnoresEmpty() {
        var set = RangeSet()
        set.insert(50..<60)
        set.insert(0..<5)
        set.insert(7..<7)
        set.insert(20..<30)
        #expect(set.ranges == [0..<5, 20..<30, 50..<60])
    }

    @Test func containsOnlyWhollyCoveredRanges() {
        let set = RangeSet([0..<10, 20..<30])
        #expect(set.contains(0..<10))
        #expect(set.contains(22..<25))
        #expect(!set.contains(5..<15))
        #expect(!set.contains(10..<20))
        #expect(!set.contains(29..<31))
        #expect(set.contains(40..<40))
        #expect(!RangeSet().contains(0..<1))
    }
}
