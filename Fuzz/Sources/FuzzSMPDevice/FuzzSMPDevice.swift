import BleotaCodec
import BleotaEngine
import BleotaLink
import FuzzSupport

@testable import BleotaProtocols

/// The simulated MCUboot device's SMP server (``SMPDevice/respond(to:environment:)``,
/// what `bleota sim serve` and the `sim://…?protocol=smp` devices answer with),
/// fed requests from a hostile client.
///
/// Input: a byte stream of SMP messages, split as the device's reassembler
/// splits it. The device is fresh each time: a factory image in the primary
/// slot, a file `/lfs/hello.txt`, a 2475-byte buffer.
///
/// - Answering never traps or hangs, whatever arrives.
/// - Every message of 8 bytes or more gets exactly one answer, as Zephyr
///   gives it: a read's response to a read, a write's to anything else (an
///   unknown op is ENOTSUP), same group, sequence and command, a body that is
///   a map, encodes and decodes back, and fits the device's buffer.
/// - Fewer than 8 bytes get no answer.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSMPDevice(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = Fuzzer.bytes(data, size)
    let parameters = MCUmgrParameters(bufferSize: 2475, bufferCount: 4)
    var reassembler = SMPReassembler(limit: parameters.bufferSize + SMPHeader.size)
    let messages = reassembler.feed(input)

    let answers = runBlocking { () -> [(SMPPacket, SMPDevice.Aftermath)?] in
        let storage = SMPDeviceStorage(primary: factoryImage, slotSize: 64 * 1024)
        storage.withState { $0.files["/lfs/hello.txt"] = Array("Hello from bleota's simulated device.\n".utf8) }
        let device = SMPDevice(name: "fuzz", storage: storage, parameters: parameters)
        let environment = DeviceEnvironment(clock: InstantClock()) { _ in }
        var answers: [(SMPPacket, SMPDevice.Aftermath)?] = []
        for message in messages {
            let answer = await device.respond(to: message, environment: environment)
            if let answer, answer.1 == .reset { _ = storage.boot() }
            answers.append(answer)
        }
        return answers
    }

    for (message, answer) in zip(messages, answers) {
        // Zephyr answers every message with a header: reads with a read's
        // response, anything else (writes, responses, ops 4…7) with a write's.
        guard message.count >= SMPHeader.size else {
            invariant(answer == nil, "an answer to a message without a header")
            continue
        }
        guard let (response, _) = answer else {
            fatalError("invariant violated: no answer to \(message.hexString)")
        }
        let header = response.header
        let expectedOperation: SMPHeader.Operation = message[0] & 0x07 == 0 ? .readResponse : .writeResponse
        let expectedVersion: SMPHeader.Version = message[0] & 0x18 == 0 ? .v1 : .v2
        invariant(
            header.operation == expectedOperation && header.version == expectedVersion
                && header.group.rawValue == UInt16(message[4]) << 8 | UInt16(message[5])
                && header.sequence == message[6] && header.command == message[7],
            "response header \(header) to request \(message.prefix(8).hexString)")
        let bytes = response.encode()
        invariant(bytes.count <= parameters.bufferSize, "a \(bytes.count)-byte response from a device with a \(parameters.bufferSize)-byte buffer")
        do {
            let decoded = try SMPPacket(decoding: bytes)
            invariant(decoded.body == response.body, "the response body does not round-trip")
        } catch {
            fatalError("invariant violated: the device's response does not decode: \(error)")
        }
    }
    return 0
}

/// An MCUboot image as the simulator's factory image: built by bleota, hash only.
let factoryImage = MCUbootImage.build(
    firmware: (0..<1024).map { UInt8(truncatingIfNeeded: $0 &* 7) },
    version: .init(major: 1, minor: 0, revision: 0, build: 0))

@main
enum Main {
    static func main() { Fuzzer.main { fuzzSMPDevice($0, $1) } }
}
