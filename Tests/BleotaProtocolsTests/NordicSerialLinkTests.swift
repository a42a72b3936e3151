import BleotaCodec
import BleotaEngine
import BleotaLink
import Testing

@testable import BleotaProtocols

/// A link that only passes packets on, as `sim serve --link`'s shaping does: it knows
/// nothing of channels, so its channel link is the framed one; its parameters (the
/// transport among them) are the inner link's.
final class PassingLink: Link {
    let inner: any Link
    init(_ inner: any Link) { self.inner = inner }
    var parameters: LinkParameters { inner.parameters }
    func send(_ packet: [UInt8]) async throws(LinkError) { try await inner.send(packet) }
    func receive() async throws(LinkError) -> [UInt8] { try await inner.receive() }
    func close() async { await inner.close() }
}

/// Secure DFU's serial transport as a channel link: the line carries the control point alone,
/// and the device half tells it by the transport its link reports, through a link that only
/// passes packets on, not by the type of the link it was given or a channel number.
@Suite struct NordicSerialLinkTests {
    @Test func aSerialBootloaderBehindAnotherLinkAnswersTheSerialOnlyRequestsOnTheLine() async throws {
        let (hostLine, deviceLine) = SerialLinePipe.pair()
        let host = NordicSerialLink(lines: hostLine)
        let device = NordicSecureDFUDevice(flash: NordicBootloader.Flash(), startInBootloader: true, serialMTU: 2051)
        let deviceLink = PassingLink(NordicSerialLink(lines: deviceLine))
        let serving = Task { await device.serve(deviceLink, environment: DeviceEnvironment(clock: SystemClock()) { _ in }) }
        let line = NordicDFUChannel.controlPoint.rawValue
        #expect(host.parameters.transport == .nordicSerial && deviceLink.parameters.transport == .nordicSerial)

        try await host.send(message: .directoryQuery)
        #expect(try await host.receiveMessage() == .directory([line]), "a serial line lists only its control point")
        try await host.send(channel: line, NordicDFURequest.getSerialMTU.encode())
        guard case .packet(line, let answer) = try await host.receiveMessage() else {
            Issue.record("no answer on the line")
            return
        }
        #expect(try NordicDFUResponse(decoding: Array(answer)).payload == .serialMTU(2051), "Get MTU is answered over serial only")
        try await host.send(channel: line, NordicDFURequest.ping(id: 7).encode())
        guard case .packet(line, let pong) = try await host.receiveMessage() else {
            Issue.record("no answer to Ping")
            return
        }
        #expect(try NordicDFUResponse(decoding: Array(pong)).payload == .ping(id: 7))
        // The BLE characteristics are not on the line.
        await #expect(throws: LinkError.self) { try await host.send(channel: NordicDFUChannel.packet.rawValue, [1, 2, 3]) }
        serving.cancel()
        await host.close()
        await deviceLink.close()
        await serving.value
    }
}
