import BleotaCodec
import Testing
@testable import BleotaProtocols

@Test func dataPacketRoundTrip() throws {
    let packet = NativeMessage.data(.init(sequence: 0xFFFF, payload: [1, 2, 3]))
    let decoded = try NativeMessage(decoding: packet.encode())
    #expect(decoded == packet)
}
