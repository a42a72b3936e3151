import BleotaCodec
import FuzzSupport

@testable import BleotaProtocols

/// The simulated Nordic bootloaders (Secure DFU's ``NordicBootloader`` and
/// legacy DFU's ``NordicLegacyBootloader``), fed a hostile host's writes.
///
/// Input: records `[kind, length, bytes…]`; kind bit 0 picks the control
/// point (0) or the packet characteristic (1), bit 1 the serial transport
/// for Secure DFU, bit 2 a reset (RAM reloaded from flash).
///
/// - Nothing traps, whatever arrives.
/// - Every answer decodes as an answer of its kind.
/// - Secure DFU activates an application only when its bytes have the
///   SHA-256 of the init packet that was executed for it; legacy DFU only
///   right after a Validate it answered with success.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNordicBootloaders(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    var records: [(kind: UInt8, bytes: [UInt8])] = []
    var index = 0
    while index + 2 <= input.count {
        let kind = input[index]
        let length = min(Int(input[index + 1]), input.count - index - 2)
        records.append((kind, Array(input[(index + 2)..<(index + 2 + length)])))
        index += 2 + length
    }

    var flash = NordicBootloader.Flash()
    flash.application = [0xAA]
    flash.slotSize = 64 * 1024
    var secure = NordicBootloader(flash: flash)
    var legacyFlash = NordicLegacyBootloader.Flash()
    legacyFlash.application = [0xAA]
    legacyFlash.slotSize = 64 * 1024
    var legacy = NordicLegacyBootloader(flash: legacyFlash)
    var validatedAt: Int?

    for (position, record) in records.enumerated() {
        if record.kind & 4 != 0 {
            secure.restoreFromFlash()
            legacy.restart()
            validatedAt = nil
            continue
        }
        let executed = secure.validInitPacket
        let actions: [NordicBootloader.Action]
        if record.kind & 1 == 0 {
            let request: NordicDFURequest
            do { request = try NordicDFURequest(decoding: record.bytes) } catch {
                invariant(error.offset >= 0 && error.offset <= record.bytes.count, "request error offset outside the write")
                continue
            }
            actions = secure.handle(request, serial: record.kind & 2 != 0)
        } else {
            actions = secure.receiveData(record.bytes)
        }
        for action in actions {
            switch action {
            case .respond(let response):
                do { _ = try NordicDFUResponse(decoding: response.encode()) } catch {
                    fatalError("invariant violated: an answer that does not decode: \(response.encode().hexString): \(error)")
                }
            case .activate(.application):
                guard let packet = executed, let application = secure.flash.application else {
                    fatalError("invariant violated: an application activated without an executed init packet")
                }
                invariant(packet.hashMatches(application) == true, "an application activated whose hash differs from its init packet")
            case .activate, .reset:
                break
            }
        }

        let legacyActions = record.kind & 1 == 0 ? legacy.control(record.bytes) : legacy.packet(record.bytes)
        for action in legacyActions {
            switch action {
            case .notify(let notification):
                let bytes = notification.encode()
                do {
                    let decoded = try NordicLegacyNotification(decoding: bytes)
                    invariant(decoded == notification, "a notification changed in decoding")
                } catch {
                    fatalError("invariant violated: a notification that does not decode: \(bytes.hexString): \(error)")
                }
                if notification == .response(.validate, .success) { validatedAt = position }
            case .activate:
                invariant(validatedAt != nil, "legacy DFU activated without a successful Validate")
                validatedAt = nil
            case .reset:
                validatedAt = nil
            }
        }
    }
    return 0
}

@main
enum Main {
    static func main() { Fuzzer.main { fuzzNordicBootloaders($0, $1) } }
}
