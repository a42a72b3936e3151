import BleotaATT
import BleotaLink
import BleotaSystem
import Glibc
import Synchronization
import Testing

@testable import BleotaBlueZ

/// Records every call and answers from a script, so the order and arguments
/// of the socket calls can be checked without a Bluetooth kernel.
final class MockSocketSystem: SocketSystem {
    let calls = Mutex<[String]>([])
    let connectCompletes: Bool
    let soError: Int32
    let socketErrno: Int32?

    init(connectCompletes: Bool = false, soError: Int32 = 0, socketErrno: Int32? = nil) {
        self.connectCompletes = connectCompletes
        self.soError = soError
        self.socketErrno = socketErrno
    }

    private func log(_ call: String) { calls.withLock { $0.append(call) } }

    func l2capSocket() throws(SocketError) -> Int32 {
        log("socket")
        if let socketErrno { throw SocketError("socket", socketErrno) }
        return 42
    }
    func setOption(_ fd: Int32, level: Int32, name: Int32, value: [UInt8]) throws(SocketError) { log("setsockopt \(level) \(name) \(value)") }
    func getOption(_ fd: Int32, level: Int32, name: Int32, size: Int) throws(SocketError) -> [UInt8] {
        log("getsockopt \(level) \(name)")
        return withUnsafeBytes(of: soError) { Array($0) }
    }
    func bind(_ fd: Int32, _ address: L2CAPAddress) throws(SocketError) { log("bind \(address.address) cid=\(address.cid) psm=\(address.psm) \(address.type)") }
    func connect(_ fd: Int32, _ address: L2CAPAddress) throws(SocketError) -> Bool {
        log("connect \(address.address) cid=\(address.cid) psm=\(address.psm) \(address.type)")
        return connectCompletes
    }
    func listen(_ fd: Int32, backlog: Int32) throws(SocketError) { log("listen") }
    func accept(_ fd: Int32) throws(SocketError) -> (fd: Int32, peer: L2CAPAddress)? { nil }
    func send(_ fd: Int32, _ bytes: [UInt8]) throws(SocketError) -> Bool {
        log("send \(bytes)")
        return true
    }
    func receive(_ fd: Int32, capacity: Int) throws(SocketError) -> [UInt8]? { [] }
    func close(_ fd: Int32) { log("close") }
    func wait(_ fd: Int32, writable: Bool) async throws(SocketError) { log(writable ? "wait writable" : "wait readable") }
}

let adapter = L2CAPAddress(address: BluetoothAddress("00:AA:01:00:00:00")!, type: .public, cid: L2CAPAddress.attChannel)
let device = L2CAPAddress(address: BluetoothAddress("00:AA:01:01:00:01")!, type: .random, cid: L2CAPAddress.attChannel)

@Suite struct L2CAPSocketTests {
    @Test func configuresBeforeConnectingAndConnectsWithoutBlocking() async throws {
        let system = MockSocketSystem()
        let socket = try await L2CAPSocket.connect(
            from: adapter, to: device, security: .medium, receiveMTU: 247,
            timeout: .seconds(5), clock: SystemClock(), system: system)
        #expect(socket.fd == 42)
        #expect(
            system.calls.withLock { $0 } == [
                "socket",
                "setsockopt 274 4 [2, 0]",  // BT_SECURITY medium, before connect
                "bind 00:AA:01:00:00:00 cid=4 psm=0 public",
                "setsockopt 274 13 [247, 0]",  // BT_RCVMTU: only accepted once bound to an LE address
                "connect 00:AA:01:01:00:01 cid=4 psm=0 random",
                "wait writable",  // EINPROGRESS: wait, then read SO_ERROR
                "getsockopt 1 4",
            ])
    }

    @Test func connectErrorFromSOErrorClosesTheSocket() async throws {
        let system = MockSocketSystem(soError: ECONNREFUSED)
        let error = await #expect(throws: SocketError.self) {
            _ = try await L2CAPSocket.connect(from: adapter, to: device, timeout: .seconds(5), clock: SystemClock(), system: system)
        }
        #expect(error == SocketError("connect", ECONNREFUSED))
        #expect(system.calls.withLock { $0.last } == "close")
    }

    @Test func lowSecurityAndFixedChannelSetNoOptions() async throws {
        let system = MockSocketSystem(connectCompletes: true)
        _ = try await L2CAPSocket.connect(from: adapter, to: device, timeout: .seconds(5), clock: SystemClock(), system: system)
        #expect(system.calls.withLock { $0 } == ["socket", "bind 00:AA:01:00:00:00 cid=4 psm=0 public", "connect 00:AA:01:01:00:01 cid=4 psm=0 random"])
    }

    @Test func kernelWithoutBluetoothSaysSo() async throws {
        let system = MockSocketSystem(socketErrno: EAFNOSUPPORT)
        let error = await #expect(throws: SocketError.self) {
            _ = try await L2CAPSocket.connect(from: adapter, to: device, timeout: .seconds(5), clock: SystemClock(), system: system)
        }
        #expect(error?.code == EAFNOSUPPORT)
    }

    /// Real non-blocking sockets and the real epoll reactor, on a
    /// `socketpair(AF_UNIX, SOCK_SEQPACKET)` standing in for an L2CAP channel.
    @Test func socketpairStandInCarriesPacketsThroughTheReactor() async throws {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        let system = LinuxSocketSystem.shared
        let a = L2CAPLink(socket: .adopt(fd: fds[0], system: system, peer: device), maximumPayload: 512, description: "a")
        let b = L2CAPLink(socket: .adopt(fd: fds[1], system: system, peer: adapter), maximumPayload: 512, description: "b")
        // The receiver waits first: the reactor must wake it when data arrives.
        async let received = b.receive()
        // Until it is parked on its descriptor in the reactor (a liveness bound of 10 s, not a timing assertion).
        let clock = SystemClock()
        while DescriptorReactor.shared.waitingTasks(on: fds[1]) < 1, clock.now < .seconds(10) { await Task.yield() }
        try await a.send([1, 2, 3])
        #expect(try await received == [1, 2, 3])
        // Packet boundaries survive (SEQPACKET), many in a row.
        for index in 0..<200 { try await a.send([UInt8(index), UInt8(index)]) }
        for index in 0..<200 { #expect(try await b.receive() == [UInt8(index), UInt8(index)]) }
        await a.close()
        await #expect(throws: LinkError.self) { _ = try await b.receive() }
        await b.close()
    }

    @Test func attBearerRunsOverTheStandIn() async throws {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        let system = LinuxSocketSystem.shared
        let central = L2CAPLink(socket: .adopt(fd: fds[0], system: system, peer: device), maximumPayload: 517, description: "central")
        let peripheral = L2CAPLink(socket: .adopt(fd: fds[1], system: system, peer: adapter), maximumPayload: 517, description: "peripheral")
        let server = GATTServer()
        server.addService(.bit16(0x180A), characteristics: [CharacteristicDefinition(uuid: .bit16(0x2A29), properties: [.read], value: Array("bleota".utf8))])
        let clientBearer = ATTBearer(link: central, clock: SystemClock())
        let serverBearer = ATTBearer(link: peripheral, clock: SystemClock())
        await serverBearer.setServer(server)
        let value = try await withThrowingTaskGroup(of: [UInt8]?.self) { group in
            group.addTask {
                await clientBearer.run()
                return nil
            }
            group.addTask {
                await serverBearer.run()
                return nil
            }
            let client = GATTClient(bearer: clientBearer)
            _ = try await client.exchangeMTU()
            let service = try #require(try await client.discoverPrimaryServices().first)
            let characteristic = try #require(try await client.discoverCharacteristics(service).first)
            let value = try await client.read(characteristic.valueHandle)
            await clientBearer.close("done")
            await serverBearer.close("done")
            for try await _ in group {}
            return value
        }
        #expect(value == Array("bleota".utf8))
    }

    @Test func bleAddressesParseWithClearErrors() {
        let parsed = try? BLEDeviceAddress.parse("ble://C0:FF:EE:00:00:01?type=random&security=medium&psm=0x80").get()
        #expect(parsed?.address.description == "C0:FF:EE:00:00:01")
        #expect(parsed?.type == .random)
        #expect(parsed?.security == .medium)
        #expect(parsed?.psm == 0x80)
        #expect(parsed?.address.littleEndian == [0x01, 0x00, 0x00, 0xEE, 0xFF, 0xC0])
        for (text, message) in [
            ("ble://C0:FF:EE", "'C0:FF:EE' is not a Bluetooth address: write six hex bytes like ble://C0:FF:EE:00:00:01"),
            ("ble://C0:FF:EE:00:00:01?type=odd", "ble:// type 'odd' is not public or random"),
            ("ble://C0:FF:EE:00:00:01?psm=0x10", "ble:// psm '0x10' is out of range: LE dynamic PSMs are 0x80…0xFF"),
            ("ble://C0:FF:EE:00:00:01?colour=red", "unknown ble:// key 'colour': use type, adapter, security, psm, phy, interval"),
            ("ble://C0:FF:EE:00:00:01?phy=3m", "ble:// phy '3m' is not 1m, 2m or coded"),
            ("ble://C0:FF:EE:00:00:01?interval=5-10", "ble:// interval '5-10' is out of range: LE connection intervals are 7.5…4000 ms, MIN ≤ MAX"),
            ("ble://C0:FF:EE:00:00:01?interval=fast", "ble:// interval 'fast' is not MIN-MAX in milliseconds, e.g. interval=7.5-15"),
        ] {
            guard case .failure(let error) = BLEDeviceAddress.parse(text) else {
                Issue.record("\(text) parsed")
                continue
            }
            #expect(error.description == message)
        }
    }

    @Test func probeReportsThisMachinesBluetooth() {
        // On machines without kernel Bluetooth (CI here) the probe must say exactly that.
        let availability = BluetoothAvailability.probe()
        if case .noKernelSupport = availability {
            #expect(availability.description.hasPrefix("this machine's kernel has no Bluetooth support"))
        }
        #expect(!availability.description.isEmpty)
    }
}
