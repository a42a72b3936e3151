import BleotaCodec
import BleotaEngine
import BleotaLink
import Synchronization
import Testing

@testable import BleotaProtocols

/// A simulated MCUboot device over an in-memory link that loses the first upload request
/// whole (as a lost UDP datagram is): the host must find the loss by an echo, answered only
/// after the request, rather than by waiting out the two-second answer timeout.
final class FirstUploadLosingConnector: DeviceConnector {
    let device: SMPDevice
    /// What reached the device (or was lost), in order: "upload 0", "lost upload 0", "echo", ….
    let seen = Mutex<[String]>([])

    init(device: SMPDevice) { self.device = device }

    var description: String { "loopback://smp" }

    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        let (host, deviceEnd) = LoopbackLink.pair(maximumPayload: 2475) { [self] packet in
            guard let request = try? SMPPacket(decoding: packet) else { return packet }
            let name: String
            switch request.header.smpCommand {
            case .imageUpload: name = "upload \(request.body["off"]?.int ?? -1)"
            case .echo: name = "echo"
            default: name = "other"
            }
            return self.seen.withLock { log in
                let first = name.hasPrefix("upload") && !log.contains { $0.hasPrefix("lost") }
                log.append(first ? "lost " + name : name)
                return first ? nil : packet
            }
        }
        let device = self.device
        Task { await device.serve(deviceEnd, environment: DeviceEnvironment(clock: SystemClock()) { _ in await deviceEnd.close() }) }
        return host
    }
}

@Suite struct SMPProbeTests {
    @Test func aLostFirstUploadRequestIsFoundByAnEchoAndSentAgain() async throws {
        let image = SMPDevice.factoryImage(version: MCUbootImage.Version(major: 2, minor: 0, revision: 0, build: 0), size: 12_000)
        let device = SMPDevice(storage: SMPDeviceStorage(primary: SMPDevice.factoryImage(version: MCUbootImage.Version(major: 1, minor: 0, revision: 0, build: 0))))
        let connector = FirstUploadLosingConnector(device: device)
        let updater = SMPUpdater(connector: connector, clock: SystemClock())
        let report = try await updater.upgrade(imageBytes: image, mode: .upload)
        let staged = device.storage.snapshot.secondary.map { Array($0.prefix(image.count)) }
        #expect(staged == image, "the image whole in slot 1")
        let seen = connector.seen.withLock { $0 }.filter { $0 != "other" }
        #expect(Array(seen.prefix(3)) == ["lost upload 0", "echo", "upload 0"], "the echo, then the first chunk again: \(seen)")
        #expect(report.statistics.packetsLost == 1 && report.statistics.packetsResent == 1)
    }
}
