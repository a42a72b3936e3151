import BleotaEngine
import BleotaLink

/// A control point request and the answer to its operation: on the control point characteristic,
/// or over a serial line on its one channel. Answers to other operations are skipped.
struct NordicControlPointRequest: ChannelRequest {
    let request: NordicDFURequest
    let channel: UInt8

    init(_ request: NordicDFURequest, on connection: NordicSecureDFUUpdater.Connection) {
        self.request = request
        self.channel = connection.controlChannel
    }

    var what: String { "the bootloader's \(request.operation)" }
    func encode() -> ChannelMessage { .packet(channel, request.encode()) }
    func response(from message: ChannelMessage) -> NordicDFUResponse? {
        guard case .packet(let from, let payload) = message, from == channel,
            let response = try? NordicDFUResponse(decoding: Array(payload)), response.operation == request.operation
        else { return nil }
        return response
    }
}

/// A write to a buttonless service (`01`, or `02 len name`) and its indication `20 op status`.
/// A status outside `ble_dfu_buttonless_rsp_code_t` is a protocol violation, not a refusal.
struct NordicButtonlessRequest: ChannelRequest {
    let channel: NordicDFUChannel
    let bytes: [UInt8]

    var what: String { bytes.first == NordicButtonless.setAdvertisingName ? "the buttonless service's set-name" : "the buttonless jump" }
    func encode() -> ChannelMessage { .packet(channel.rawValue, bytes) }
    func response(from message: ChannelMessage) throws(DeviceRefusal) -> NordicButtonless.Status? {
        guard case .packet(let from, let payload) = message, from == channel.rawValue, payload.count == 3,
            payload[payload.startIndex] == NordicButtonless.responseCode, payload[payload.startIndex + 1] == bytes.first
        else { return nil }
        let code = payload[payload.startIndex + 2]
        guard let status = NordicButtonless.Status(rawValue: code) else {
            throw DeviceRefusal(.protocolViolation, "the buttonless service answered status 0x\(String(code, radix: 16))")
        }
        return status
    }
}
