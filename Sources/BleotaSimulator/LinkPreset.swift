/// Named link models for common pairings; numbers and sources in
/// `protocols/link-model.md`.
public struct LinkPreset: Sendable, Hashable {
    public var name: String
    public var summary: String
    public var model: LinkModel

    public static let all: [LinkPreset] = [
        LinkPreset(
            name: "1m-no-dle-30ms",
            summary: "an older phone: LE 1M, no Data Length Extension, MTU 23, 30 ms interval, 4 packets per event",
            model: LinkModel(
                phy: .le1M, linkLayerPayload: 27, attMTU: 23, connectionInterval: .milliseconds(30),
                packetsPerEvent: 4, deviceBuffer: 32)),
        LinkPreset(
            name: "1m-dle-7.5ms",
            summary: "LE 1M with DLE (251), MTU 247, the shortest interval 7.5 ms, 6 packets per event",
            model: LinkModel(
                phy: .le1M, linkLayerPayload: 251, attMTU: 247, connectionInterval: .microseconds(7500),
                packetsPerEvent: 6, deviceBuffer: 32)),
        LinkPreset(
            name: "2m-dle",
            summary: "a modern phone: LE 2M, DLE 251, MTU 247, 15 ms interval, 8 packets per event",
            model: LinkModel(
                phy: .le2M, linkLayerPayload: 251, attMTU: 247, connectionInterval: .milliseconds(15),
                packetsPerEvent: 8, deviceBuffer: 32)),
        LinkPreset(
            name: "linux-bluez",
            summary: "a Linux host with a USB controller: LE 1M, DLE 251, MTU 517, 30 ms interval, 12 packets per event",
            model: LinkModel(
                phy: .le1M, linkLayerPayload: 251, attMTU: 517, connectionInterval: .milliseconds(30),
                packetsPerEvent: 12, deviceBuffer: 32)),
        LinkPreset(
            name: "slow-flash",
            summary: "a fast link (LE 2M, DLE, 15 ms) to a device with a 4-packet buffer, 2 ms per packet and 85 ms 4 KiB page erases: "
                + "drops packets when flooded, or holds its link where the protocol's firmware does",
            model: LinkModel(
                phy: .le2M, linkLayerPayload: 251, attMTU: 247, connectionInterval: .milliseconds(15),
                packetsPerEvent: 8, deviceBuffer: 4, deviceProcessingPerPacket: .milliseconds(2),
                deviceProcessingPerByte: .nanoseconds(500), flashPageSize: 4096,
                flashEraseTimePerPage: .milliseconds(85))),
    ]

    public static func named(_ name: String) -> LinkPreset? { all.first { $0.name == name } }
}
