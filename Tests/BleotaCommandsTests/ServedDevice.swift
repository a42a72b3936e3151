import Foundation
import Testing

/// `bleota sim serve` as a subprocess of a CLI test: started with its arguments, and the first line it
/// printed read, which says where it serves (`serving smp over udp at 127.0.0.1:PORT`).
struct ServedDevice {
    let process: Process
    /// The first line it printed.
    let firstLine: String

    /// `sim serve` with `arguments` (after `sim serve`), run from the repository's root.
    static func start(_ arguments: [String]) throws -> ServedDevice {
        let server = Process()
        server.executableURL = BleotaProcess.executable
        server.currentDirectoryURL = BleotaProcess.repositoryRoot
        server.arguments = ["sim", "serve"] + arguments
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
        return ServedDevice(process: server, firstLine: String(text.split(separator: "\n").first ?? ""))
    }

    /// Where it serves: the first line's last word (`127.0.0.1:PORT`, a pseudo-terminal's path).
    func place() throws -> String { try #require(firstLine.split(separator: " ").last.map(String.init), "\(firstLine)") }

    /// The UDP port it serves on.
    func port() throws -> Int {
        try #require(firstLine.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }, "\(firstLine)")
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}
