import Foundation
import Testing

/// bleota's own protocol over UDP, named with --protocol: `flash` against `bleota sim serve`.
@Suite struct NativeUDPCLITests {
    /// A UDP port free a moment ago (the kernel's pick for port 0).
    static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
        try #require(bound == 0)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    @Test func flashOverUDPToASimServeDevice() throws {
        let server = Process()
        server.executableURL = BleotaProcess.executable
        server.arguments = ["sim", "serve", "--protocol", "native", "--udp", "127.0.0.1:\(try Self.freePort())", "--duration", "60"]
        let out = Pipe()
        server.standardOutput = out
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        // "serving native over udp at 127.0.0.1:PORT"
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = out.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self)
        let port = try #require(text.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }, "\(text)")
        let flash = try BleotaProcess.run([
            "flash", "samples/firmware/blinky.bin", "--device", "udp://127.0.0.1:\(port)",
            "--protocol", "native", "--version-label", "2.0.0", "--quiet",
        ])
        #expect(flash.status == 0, "\(flash.stderr)")
        #expect(flash.stdout.contains("device now runs '2.0.0'"), "\(flash.stdout)")
        // Without --protocol, what answers on a UDP port is taken to be MCUmgr.
        let unnamed = try BleotaProcess.run(["echo", "x", "--device", "udp://127.0.0.1:\(port)"])
        #expect(unnamed.status != 0)
    }
}
