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

    /// A served device that keeps its image from one flash to the next, and its UDP port.
    static func serve(_ arguments: [String] = []) throws -> (Process, Int) {
        let server = Process()
        server.executableURL = BleotaProcess.executable
        server.arguments = ["sim", "serve", "--protocol", "native", "--udp", "127.0.0.1:\(try Self.freePort())", "--duration", "60"] + arguments
        let out = Pipe()
        server.standardOutput = out
        server.standardError = FileHandle.nullDevice
        try server.run()
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = out.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self)
        let port = try #require(text.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }, "\(text)")
        return (server, port)
    }

    /// `flash --base`: the device runs the base, so a delta patch goes instead of the image, the
    /// device rebuilds and verifies the new image before activating it; a base the device does not run
    /// is refused at the first connection with --delta always, and sent whole with auto, saying why.
    @Test func flashSendsADeltaPatchWhenTheDeviceRunsTheBase() throws {
        let (server, port) = try Self.serve()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let firmware = "samples/cortex-m/gcc-arm-none-eabi-12.2.1"
        let device = ["--device", "udp://127.0.0.1:\(port)", "--protocol", "native"]
        let first = try BleotaProcess.run(["flash", "\(firmware)/sensor-hub-2.0.0.bin", "--version-label", "2.0.0", "--quiet"] + device)
        #expect(first.status == 0, "\(first.stderr)")
        let patched = try BleotaProcess.run(
            ["flash", "\(firmware)/delta/sensor-hub-2.0.1.bin", "--base", "\(firmware)/sensor-hub-2.0.0.bin", "--version-label", "2.0.1", "--json"] + device)
        #expect(patched.status == 0, "\(patched.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(patched.stdout.utf8)) as? [String: Any])
        #expect(report["delta"] as? Bool == true && report["versionAfter"] as? String == "2.0.1", "\(report)")
        let sent = try #require(report["streamBytes"] as? Int)
        #expect(sent * 20 < 146_736, "\(sent) bytes sent for a 146 736-byte image")
        // The device now runs 2.0.1, not the base: always refuses before anything is sent…
        let always = try BleotaProcess.run(
            ["flash", "\(firmware)/delta/sensor-hub-2.1.0.bin", "--base", "\(firmware)/sensor-hub-2.0.0.bin", "--delta", "always", "--version-label", "2.1.0"]
                + device)
        #expect(always.status == 4)
        #expect(always.stderr.contains("error: connect failed: the device runs sha256:") && always.stderr.contains("give --base the image it runs"), "\(always.stderr)")
        // …and auto sends the whole image, saying why.
        let auto = try BleotaProcess.run(
            ["flash", "\(firmware)/delta/sensor-hub-2.1.0.bin", "--base", "\(firmware)/sensor-hub-2.0.0.bin", "--version-label", "2.1.0", "-v"] + device)
        #expect(auto.status == 0, "\(auto.stderr)")
        #expect(auto.stderr.contains("sending the whole image: the device runs sha256:"), "\(auto.stderr)")
        #expect(auto.stdout.contains("device now runs '2.1.0'") && !auto.stdout.contains("delta patch"))
        // A protocol that sends whole images only says so.
        let smp = try BleotaProcess.run(
            ["flash", "samples/mcuboot/imgtool-2.5.0/app-1.1.0-ecdsa-p256.bin", "--device", "sim://2m-dle", "--base", "samples/firmware/blinky.bin"])
        #expect(smp.status == 2 && smp.stderr.contains("--base: SMP (MCUmgr) sends whole images only: drop --base"), "\(smp.stderr)")
    }

    @Test func flashOverUDPToASimServeDevice() throws {
        let (server, port) = try Self.serve()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
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
