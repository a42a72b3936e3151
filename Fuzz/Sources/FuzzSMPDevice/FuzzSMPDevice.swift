import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import FuzzSupport

/// The simulated MCUboot device's SMP server (``SMPDevice/respond(to:environment:)``,
/// what `bleota sim serve` and the `sim://…?protocol=smp` devices answer with),
/// fed requests from a hostile client.
///
/// Input: a byte stream of SMP messages, split as the device's reassembler
/// splits it. The device is fresh each time: a factory image in the primary
/// slot, a file `/lfs/hello.txt`, a 2475-byte buffer.
///
/// - Answering never traps or hangs, whatever arrives.
/// - Every request with a valid header gets exactly one answer: a response
///   to the same operation, group, sequence and command, whose body is a map
///   that encodes and decodes back, and which fits the device's buffer.
/// - A message whose header is not a request gets no answer.
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
        var reader = ByteReader(message)
        guard let request = try? SMPHeader(decoding: &reader), !request.operation.isResponse else {
            invariant(answer == nil, "an answer to a message that is no request")
            continue
        }
        guard let (response, _) = answer else {
            fatalError("invariant violated: no answer to a request \(message.hexString)")
        }
        let header = response.header
        invariant(header.operation == request.operation.response && header.version == request.version
                  && header.group == request.group && header.sequence == request.sequence && header.command == request.command,
                  "response header \(header) to request \(request)")
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
let factoryImage = MCUbootImage.build(firmware: (0..<1024).map { UInt8(truncatingIfNeeded: $0 &* 7) },
                                      version: .init(major: 1, minor: 0, revision: 0, build: 0))

@main
enum Main {
    static func main() { Fuzzer.main { fuzzSMPDevice($0, $1) } }
}
