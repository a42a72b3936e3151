import BleotaEngine
import BleotaLink

/// A native request and the reply that answers it, as SMP's requests name their responses:
/// ``Session/request(_:on:step:timeout:)`` sends ``message`` and waits for the reply
/// ``response(from:)`` recognises. An ERROR reply refuses any of them.
protocol NativeRequest: Sendable {
    associatedtype Response: Sendable
    var message: NativeMessage { get }
    func response(from reply: NativeMessage) -> Response?
}

extension NativeRequest {
    /// "the hello request".
    var what: String { "the \(message.opcode?.name ?? "native") request" }
}

extension NativeMessage {
    /// This message's opcode: a request's, or a transfer message's; nil for a response, whose
    /// first byte is its request's opcode with the top bit set.
    var opcode: Opcode? {
        switch self {
        case .hello: .hello
        case .enterBootloader: .enterBootloader
        case .start: .start
        case .status: .status
        case .verify: .verify
        case .activate: .activate
        case .reboot: .reboot
        case .abort: .abort
        case .getFile: .getFile
        case .data: .data
        case .ack: .ack
        case .nack: .nack
        case .ackRequest: .ackRequest
        case .segment: .segment
        case .ackInterval: .ackInterval
        case .error: .error
        case .helloResponse, .startResponse, .statusResponse, .verifyResponse, .getFileResponse, .simpleResponse: nil
        }
    }
}

/// HELLO: what the device is and takes.
struct NativeHelloRequest: NativeRequest {
    var message: NativeMessage { .hello(.init()) }
    func response(from reply: NativeMessage) -> NativeMessage.HelloResponse? {
        if case .helloResponse(let hello) = reply { return hello }
        return nil
    }
}

/// START: the ranges of the image the device already holds.
struct NativeStartRequest: NativeRequest {
    let start: NativeMessage.Start
    var message: NativeMessage { .start(start) }
    func response(from reply: NativeMessage) -> NativeMessage.RangesResponse? {
        if case .startResponse(let ranges) = reply { return ranges }
        return nil
    }
}

/// VERIFY: the device's verdict on the image it holds.
struct NativeVerifyRequest: NativeRequest {
    var message: NativeMessage { .verify }
    func response(from reply: NativeMessage) -> NativeMessage.VerifyResult? {
        if case .verifyResponse(let result) = reply { return result }
        return nil
    }
}

/// GET_FILE: a file's size and digest before a pull.
struct NativeGetFileRequest: NativeRequest {
    let file: NativeMessage.GetFile
    var message: NativeMessage { .getFile(file) }
    func response(from reply: NativeMessage) -> NativeMessage.FileInfo? {
        if case .getFileResponse(let info) = reply { return info }
        return nil
    }
}

/// A request answered by a status alone (ENTER_BOOTLOADER, ACTIVATE, REBOOT, ABORT).
struct NativeSimpleRequest: NativeRequest {
    let message: NativeMessage
    func response(from reply: NativeMessage) -> NativeStatus? {
        if case .simpleResponse(let request, let status) = reply, request == message.opcode { return status }
        return nil
    }
}
