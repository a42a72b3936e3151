import BleotaCodec
import BleotaLink
import BleotaSystem
import BleotaTestSupport
import Foundation
import Glibc
import Logging
import Synchronization
import Testing

@testable import BleotaBlueZ

/// The kernel's side of a management socket, scripted: a `socketpair` whose
/// other end this reads commands from and writes events to.
final class ScriptedKernel: Sendable {
    let fd: Int32
    let channel: ManagementChannel

    init() throws {
        var pair: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw SocketError("socketpair", errno)
        }
        fd = pair[1]
        channel = ManagementChannel(descriptor: pair[0])
    }

    /// The next command bleota sent.
    func command() async throws -> ManagementPacket {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 { return try ManagementPacket(decoding: Array(buffer[..<count])) }
            guard errno == EAGAIN else { throw SocketError("recv", errno) }
            try await DescriptorReactor.shared.wait(fd, writable: false)
        }
    }

    func send(_ code: UInt16, index: UInt16 = 0, _ parameters: [UInt8]) {
        let bytes = ManagementPacket(code: code, index: index, parameters: parameters).encode()
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) }
    }

    /// Answers `command` with Command Complete and `returnParameters`.
    func complete(_ command: ManagementPacket, status: UInt8 = 0, _ returnParameters: [UInt8] = []) {
        send(0x0001, index: command.index, [UInt8(command.code & 0xFF), UInt8(command.code >> 8), status] + returnParameters)
    }

    func close() {
        channel.close()
        Glibc.close(fd)
    }
}

let peer = ManagementAddress(BluetoothAddress("00:AA:01:01:00:01")!, kind: .lePublic)
/// 00:AA:01:01:00:01 (LE public) as the interface writes it.
let peerBytes: [UInt8] = [0x01, 0x00, 0x01, 0x01, 0xAA, 0x00, 0x01]

@Suite struct ManagementWireTests {
    @Test func aNewLongTermKeyEventDecodesFieldByField() throws {
        // store_hint, address, type 0x03 (authenticated P-256), central 0, enc_size 16, ediv 0, rand 0, value 16 bytes.
        let value = (0..<16).map { UInt8($0 + 0xA0) }
        let event = [0x01] + peerBytes + [0x03, 0x00, 0x10, 0x00, 0x00] + [UInt8](repeating: 0, count: 8) + value
        #expect(event.count == 37)
        let decoded = try ManagementEvent(decoding: ManagementPacket(code: 0x000A, index: 0, parameters: event))
        let key = LongTermKey(peer: peer, kind: .authenticatedP256, central: false, encryptionKeySize: 16, ediv: 0, rand: 0, value: value)
        #expect(decoded == .newLongTermKey(storeHint: true, key: key))
        #expect(key.kind.level == .fips && key.kind.secureConnections)
        // The key re-encodes to the same 36 bytes, and its description never shows the value.
        var writer = ByteWriter()
        key.encode(into: &writer)
        #expect(writer.bytes == Array(event.dropFirst()))
        #expect(!key.description.contains("a0") && !key.description.lowercased().contains("a0a1"))
    }

    @Test func aKeyWhoseCentralFlagIsNotABooleanIsRefusedAtItsOffset() {
        // Found by FuzzManagementEvent: central = 4 decoded as true and re-encoded as 1.
        let event = [0x01] + peerBytes + [0x03, 0x04, 0x10, 0x00, 0x00] + [UInt8](repeating: 0, count: 24)
        #expect(throws: DecodingError.self) { try ManagementEvent(decoding: ManagementPacket(code: 0x000A, index: 0, parameters: event)) }
        do {
            _ = try ManagementEvent(decoding: ManagementPacket(code: 0x000A, index: 0, parameters: event))
        } catch {
            #expect(error.offset == 9)
            #expect("\(error)".contains("key central"))
        }
    }

    @Test func pairingRequestsDecode() throws {
        let confirm = try ManagementEvent(decoding: ManagementPacket(code: 0x000F, index: 1, parameters: peerBytes + [0x00, 0x40, 0xE2, 0x01, 0x00]))
        #expect(confirm == .userConfirmationRequest(peer, confirmHint: false, value: 123_456))
        let passkey = try ManagementEvent(decoding: ManagementPacket(code: 0x0010, index: 1, parameters: peerBytes))
        #expect(passkey == .userPasskeyRequest(peer))
        let failed = try ManagementEvent(decoding: ManagementPacket(code: 0x0011, index: 1, parameters: peerBytes + [0x05]))
        #expect(failed == .authenticationFailed(peer, status: .authenticationFailed))
        let irk = try ManagementEvent(
            decoding: ManagementPacket(
                code: 0x0018, index: 1,
                parameters: [0x01] + [0x11, 0x22, 0x33, 0x44, 0x55, 0x66] + peerBytes + [UInt8](repeating: 7, count: 16)))
        #expect(
            irk
                == .newIdentityResolvingKey(
                    storeHint: true, rpa: BluetoothAddress("66:55:44:33:22:11")!,
                    key: IdentityResolvingKey(identity: peer, value: [UInt8](repeating: 7, count: 16))))
    }

    @Test func malformedEventsAreTypedErrorsNamingTheField() {
        #expect(throws: DecodingError(field: "address type", offset: 6, reason: .invalidValue("9 is not 0 (BR/EDR), 1 (LE public) or 2 (LE random)"))) {
            try ManagementEvent(decoding: ManagementPacket(code: 0x0010, index: 0, parameters: [1, 2, 3, 4, 5, 6, 9]))
        }
        #expect(throws: DecodingError.self) { try ManagementEvent(decoding: ManagementPacket(code: 0x000A, index: 0, parameters: [1, 2, 3])) }
        var random = seededGenerator("management-events")
        for _ in 0..<5000 {
            let code = UInt16.random(in: 0...0x20, using: &random)
            let bytes = (0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            _ = try? ManagementEvent(decoding: ManagementPacket(code: code, index: 0, parameters: bytes))
            _ = try? ManagementPacket(decoding: bytes)
        }
    }

    @Test func commandsFollowTheDocumentedLayout() {
        let reply = ManagementCommand.userPasskeyReply(peer, passkey: 123_456).packet(index: 1).encode()
        #expect(reply == [0x1E, 0x00, 0x01, 0x00, 0x0B, 0x00] + peerBytes + [0x40, 0xE2, 0x01, 0x00])
        #expect(ManagementCommand.userPasskeyReply(peer, passkey: nil).opcode == 0x001F)
        #expect(ManagementCommand.userConfirmationReply(peer, accept: false).opcode == 0x001D)
        #expect(ManagementCommand.setIOCapability(.keyboardOnly).parameters == [0x02])
        let key = LongTermKey(
            peer: peer, kind: .authenticatedLegacy, central: true, encryptionKeySize: 16, ediv: 0x1234,
            rand: 0x0102030405060708, value: [UInt8](repeating: 0x55, count: 16))
        let load = ManagementCommand.loadLongTermKeys([key]).parameters
        #expect(load.count == 2 + 36)
        #expect(Array(load.prefix(12)) == [0x01, 0x00] + peerBytes + [0x01, 0x01, 0x10])
        #expect(Array(load[12..<22]) == [0x34, 0x12, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01])
        #expect(ManagementCommand.loadIdentityResolvingKeys([]).parameters == [0, 0])
    }
}

@Suite struct ManagementChannelTests {
    @Test func repliesGoToTheirCommandAndEventsToSubscribers() async throws {
        let kernel = try ScriptedKernel()
        defer { kernel.close() }
        let events = kernel.channel.subscribe()
        async let powered = kernel.channel.send(.setPowered(true), index: 2)
        let command = try await kernel.command()
        #expect(command.code == 0x0005 && command.index == 2 && command.parameters == [1])
        // An event arrives before the reply: it goes to subscribers, the reply to the command.
        kernel.send(0x0010, index: 2, peerBytes)
        kernel.complete(command, [0x01, 0x00, 0x00, 0x00])
        #expect(try await powered == [0x01, 0x00, 0x00, 0x00])
        let first = try await events.take()
        #expect(first?.index == 2 && first?.event == .userPasskeyRequest(peer))
    }

    @Test func aRefusedCommandIsNamedWithItsStatus() async throws {
        let kernel = try ScriptedKernel()
        defer { kernel.close() }
        async let refused: ManagementError? = {
            do throws(ManagementError) { _ = try await kernel.channel.send(.setBondable(true), index: 0) } catch { return error }
            return nil
        }()
        let command = try await kernel.command()
        kernel.send(0x0002, index: 0, [UInt8(command.code & 0xFF), UInt8(command.code >> 8), 0x14])
        #expect(await refused == ManagementError(command: "Set Bondable", status: .permissionDenied))
        #expect(
            ManagementError(command: "Set Bondable", status: .permissionDenied).description
                == "Set Bondable failed: permission denied (the management interface needs CAP_NET_ADMIN)")
    }
}

/// The pairing agent against a scripted kernel: how it sets the adapter up and what it answers.
@Suite struct KernelPairingAgentTests {
    static func information(le: Bool) -> [UInt8] {
        var bytes: [UInt8] = [0x00, 0x00, 0x00, 0x01, 0xAA, 0x00] + [0x09, 0x02, 0x00]  // address, version, manufacturer
        let supported: UInt32 = 1 << 0 | 1 << 4 | 1 << 9 | 1 << 11
        let current: UInt32 = le ? 1 << 0 | 1 << 9 : 1 << 0
        bytes += withUnsafeBytes(of: supported.littleEndian) { Array($0) } + withUnsafeBytes(of: current.littleEndian) { Array($0) }
        return bytes + [0, 0, 0] + [UInt8](repeating: 0, count: 249 + 11)
    }

    /// Starts an agent for hci0 with `policy`, answering the set-up commands; returns it and their opcodes.
    static func started(_ kernel: ScriptedKernel, policy: PairingPolicy, store: BondStore?) async throws -> (KernelPairingAgent, [UInt16], [[UInt8]]) {
        async let agent = KernelPairingAgent.start(index: 0, agent: policy, store: store, logger: Logger(label: "test"), channel: kernel.channel)
        var opcodes: [UInt16] = []
        var parameters: [[UInt8]] = []
        let read = try await kernel.command()
        kernel.complete(read, information(le: false))
        let expected = store == nil ? 4 : 6
        for _ in 0..<expected {
            let command = try await kernel.command()
            opcodes.append(command.code)
            parameters.append(command.parameters)
            kernel.complete(command)
        }
        return (try await agent, opcodes, parameters)
    }

    static func temporaryStore() -> BondStore {
        BondStore(path: FileManager.default.temporaryDirectory.appendingPathComponent("bleota-bonds-\(UUID())/bonds.json").path)
    }

    @Test func startTurnsLEBondingAndSecureConnectionsOnAndAnnouncesWhatThePolicyCanAnswer() async throws {
        let kernel = try ScriptedKernel()
        defer { kernel.close() }
        let (agent, opcodes, parameters) = try await Self.started(kernel, policy: PairingPolicy(passkey: 123_456), store: Self.temporaryStore())
        // LE, bondable (mgmt's first use turns it off), Secure Connections, IO capability, then the (empty) key lists.
        #expect(opcodes == [0x000D, 0x0009, 0x002D, 0x0018, 0x0030, 0x0013])
        #expect(parameters[3] == [PairingIOCapability.keyboardOnly.rawValue])
        #expect(parameters[4] == [0, 0] && parameters[5] == [0, 0])
        #expect(agent.adapterAddress == BluetoothAddress("00:AA:01:00:00:00"))
        await agent.stop()
    }

    @Test func aPasskeyRequestIsAnsweredWithTheGivenPasskey() async throws {
        let kernel = try ScriptedKernel()
        defer { kernel.close() }
        let (agent, _, _) = try await Self.started(kernel, policy: PairingPolicy(passkey: 123_456), store: nil)
        kernel.send(0x0010, peerBytes)
        let reply = try await kernel.command()
        #expect(reply.code == 0x001E && reply.parameters == peerBytes + [0x40, 0xE2, 0x01, 0x00])
        kernel.complete(reply, peerBytes)
        #expect(await agent.method(for: peer.address) == .passkeyEntry)
        await agent.stop()
    }

    @Test func justWorksIsAcceptedAndARejectedComparisonIsRefusedAndRemembered() async throws {
        let kernel = try ScriptedKernel()
        defer { kernel.close() }
        let prompt = FixedPrompt(answer: false)
        let (agent, _, _) = try await Self.started(kernel, policy: PairingPolicy(prompt: prompt), store: nil)
        kernel.send(0x000F, peerBytes + [0x01, 0, 0, 0, 0])  // Just Works
        let yes = try await kernel.command()
        #expect(yes.code == 0x001C)
        kernel.complete(yes, peerBytes)
        await agent.expectPairing(with: peer.address)
        kernel.send(0x000F, peerBytes + [0x00, 0x40, 0xE2, 0x01, 0x00])  // numeric comparison, 123456
        let no = try await kernel.command()
        #expect(no.code == 0x001D)
        kernel.complete(no, peerBytes)
        // The kernel then reports the failure; the reason kept is the refusal, which says what to do.
        kernel.send(0x0011, peerBytes + [0x05])
        #expect(await agent.failure(for: peer.address) == .comparisonRejected(123_456))
        #expect(prompt.asked == ["does 00:AA:01:01:00:01 show 123456? [y/N] "])
        await agent.stop()
    }

    @Test func withNothingToTypeAPasskeyRequestIsRefusedAndSaysWhatToGive() async throws {
        let kernel = try ScriptedKernel()
        defer { kernel.close() }
        let (agent, _, parameters) = try await Self.started(kernel, policy: PairingPolicy.justWorks, store: nil)
        #expect(parameters[3] == [PairingIOCapability.noInputNoOutput.rawValue])
        kernel.send(0x0010, peerBytes)
        let reply = try await kernel.command()
        #expect(reply.code == 0x001F)
        kernel.complete(reply, peerBytes)
        #expect(await agent.failure(for: peer.address) == .needsUserInput(.passkeyEntry))
        await agent.stop()
    }

    @Test func keysMeantToBeKeptAreStoredPrivatelyAndLoadedAtTheNextStart() async throws {
        let kernel = try ScriptedKernel()
        defer { kernel.close() }
        let store = Self.temporaryStore()
        let (agent, _, _) = try await Self.started(kernel, policy: PairingPolicy.justWorks, store: store)
        let value = (0..<16).map { UInt8($0) }
        // Handed to the agent as its event loop would: one key to keep, one (store hint 0) not to.
        let keep = try ManagementEvent(
            decoding: ManagementPacket(
                code: 0x000A, index: 0,
                parameters: [0x01] + peerBytes + [0x03, 0x00, 0x10, 0, 0] + [UInt8](repeating: 0, count: 8) + value))
        let drop = try ManagementEvent(
            decoding: ManagementPacket(
                code: 0x000A, index: 0,
                parameters: [0x00] + [0x02, 0, 0, 0, 0, 0xC0, 0x02] + [0x02, 0x00, 0x10, 0, 0] + [UInt8](repeating: 0, count: 8) + value))
        await agent.handle(keep, index: 0)
        await agent.handle(drop, index: 0)
        let bonds = try store.load()
        await agent.stop()
        #expect(bonds.count == 1 && bonds[0].identity == peer && bonds[0].level == .fips && bonds[0].adapter == BluetoothAddress("00:AA:01:00:00:00"))
        let attributes = try FileManager.default.attributesOfItem(atPath: store.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        // A second agent loads it into the kernel.
        let second = try ScriptedKernel()
        defer { second.close() }
        let (again, _, parameters) = try await Self.started(second, policy: PairingPolicy.justWorks, store: store)
        #expect(parameters[5].count == 2 + 36 && Array(parameters[5].prefix(9)) == [0x01, 0x00] + peerBytes)
        await again.stop()
    }
}

final class FixedPrompt: PairingPrompt {
    let answer: Bool
    private let questions = Mutex<[String]>([])
    var asked: [String] { questions.withLock { $0 } }
    init(answer: Bool) { self.answer = answer }
    func readPasskey(_ question: String) async -> UInt32? {
        questions.withLock { $0.append(question) }
        return nil
    }
    func confirm(_ question: String) async -> Bool {
        questions.withLock { $0.append(question) }
        return answer
    }
    func show(_ line: String) async {}
}
