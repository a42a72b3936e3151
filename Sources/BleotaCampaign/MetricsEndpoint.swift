// Built with the Campaigns trait only (Package.swift): it serves a campaign worker's metrics.
#if Campaigns
import BleotaLink
import BleotaSystem
import Logging

/// `GET /metrics` over HTTP/1.1 for a Prometheus server to scrape: ``CampaignMetrics`` in the text
/// format, one response per connection (then closed), on the process's one reactor.
///
/// Nothing else is served: another path is 404, another method 405; a request whose headers do not
/// end within 8 KiB is answered from its request line, and one that does not come within
/// ``requestTimeout`` (a client that connects and sends nothing) is dropped, so idle connections
/// cannot pile up. It listens where `--metrics` says (127.0.0.1 unless the operator opens it wider).
public struct MetricsEndpoint: Sendable {
    public let listener: TCPListener
    public let metrics: CampaignMetrics
    let logger: Logger
    let clock: any BleotaClock

    /// How long a client has, once connected, to send its request.
    public static let requestTimeout = Duration.seconds(10)

    /// Listens on `host`:`port` (0: a free port, ``port`` tells which).
    public init(host: String, port: UInt16, metrics: CampaignMetrics, logger: Logger, clock: any BleotaClock = SystemClock()) throws(LinkError) {
        listener = try TCPListener(host: host, port: port)
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
    }

    public var port: UInt16 { listener.port }

    /// Serves until the listener is closed (``stop()``) or the task is cancelled.
    public func run() async {
        await withDiscardingTaskGroup { group in
            while let connection = try? await listener.accept() {
                group.addTask { await answer(connection) }
            }
        }
    }

    public func stop() { listener.close() }

    func answer(_ connection: TCPConnection) async {
        defer { connection.close() }
        let request: [UInt8]
        do { request = try await withDeadline(Self.requestTimeout, clock: clock) { try await Self.readRequest(connection) } } catch {
            logger.debug("metrics: a connection sent no request in time, or dropped: \(error)")
            return
        }
        let line = String(decoding: request.prefix { $0 != 0x0D && $0 != 0x0A }, as: UTF8.self).split(separator: " ")
        let response: [UInt8]
        switch (line.first, line.dropFirst().first.map { $0.split(separator: "?").first ?? "" }) {
        case ("GET", "/metrics"?):
            response = Self.response(status: "200 OK", type: "text/plain; version=0.0.4; charset=utf-8", body: metrics.text())
        case ("GET", _):
            response = Self.response(status: "404 Not Found", type: "text/plain", body: Array("only /metrics is served here\n".utf8))
        default:
            response = Self.response(status: "405 Method Not Allowed", type: "text/plain", body: Array("only GET /metrics is served here\n".utf8))
        }
        do { try await connection.write(response) } catch { logger.debug("metrics: a scrape's connection dropped: \(error)") }
    }

    /// The request up to the end of its headers, or its first 8 KiB; throws when the client
    /// closes before either.
    static func readRequest(_ connection: TCPConnection) async throws -> [UInt8] {
        let end: [UInt8] = Array("\r\n\r\n".utf8)
        var request: [UInt8] = []
        while request.count < 8192 {
            let bytes = try await connection.read(maximum: 8192 - request.count)
            guard !bytes.isEmpty else { throw LinkError.disconnected("closed before the end of its request") }
            // Only the new bytes, and the three before them, can complete the end of the headers.
            let from = max(0, request.count - (end.count - 1))
            request += bytes
            if request[from...].firstRange(of: end) != nil { break }
        }
        return request
    }

    static func response(status: String, type: String, body: [UInt8]) -> [UInt8] {
        Array("HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8) + body
    }
}

#endif
