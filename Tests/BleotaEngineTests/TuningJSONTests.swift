import Foundation
import Testing

@testable import BleotaEngine

/// JSON's units (docs/commands.md): durations in seconds as numbers, the unit in the key where it
/// is not seconds; tuning.json's delay in milliseconds, as `--delay` takes it.
@Suite struct TuningJSONTests {
    static func object(_ value: some Encodable) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(value)) as? [String: Any])
    }

    @Test func aTuningsDurationsAreSeconds() throws {
        let tuning = TransferTuning(window: 8, interPacketDelay: .microseconds(2500), ackTimeout: .milliseconds(750))
        let object = try Self.object(tuning)
        #expect(object["ackTimeout"] as? Double == 0.75)
        #expect(object["interPacketDelay"] as? Double == 0.0025)
        #expect(object["window"] as? Int == 8)
        let back = try JSONDecoder().decode(TransferTuning.self, from: JSONEncoder().encode(tuning))
        #expect(back == tuning)
        let negative = Data(#"{"ackTimeout": -1}"#.utf8)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(TransferTuning.self, from: negative) }
    }

    @Test func aSavedPointsDelayIsInMilliseconds() throws {
        let point = TuningPoint(packetSize: 120, window: 4, delay: .microseconds(1500))
        let object = try Self.object(point)
        #expect(object["delayMilliseconds"] as? Double == 1.5)
        #expect(object["delayMicroseconds"] == nil)
        #expect(try JSONDecoder().decode(TuningPoint.self, from: JSONEncoder().encode(point)) == point)
        // What 0.1.0 saved is still read.
        let old = Data(#"{"packetSize": 120, "window": 4, "delayMicroseconds": 1500}"#.utf8)
        #expect(try JSONDecoder().decode(TuningPoint.self, from: old) == point)
    }
}
