// Built with the Campaigns trait only (Package.swift): it serves a campaign worker's metrics.
#if Campaigns
import BleotaLink
import BleotaSystem
import Logging

/// `GET /metrics` over HTTP/1.1 for a Prometheus server to scrape: ``CampaignMetrics`` in the text
/// format, one response per connection (then closed), on the process's one reactor.
///
/// Nothing else is served: another path is 404, another method 405, a request line that does not
/// come within 8 KiB is dropped (a scraper that connects and sends nothing
/// holds its connection until it closes it: there is no read timeout). It listens where `--metrics` says (127.0.0.1 unless the
/// operator opens it wider).
public struct MetricsEndpoint: Sendable {
    public let listener: TCPListener
    public let metrics: CampaignMetrics
    let logger: Logger

    /// Listens on `host`:`port` (0: a free port, ``port`` tells which).
    public init(host: String, port: UInt16, metrics: CampaignMetrics, logger: Logger) throws(LinkError) {
        listener = try TCPListener(host: host, port: port)
        self.metrics = metrics
        self.logger = logger
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
        var request: [UInt8] = []
        let end: [UInt8] = Array("\r\n\r\n".utf8)
        while request.count < 8192, !request.ends(with: end) {
            guard let bytes = try? await connection.read(maximum: 8192 - request.count), !bytes.isEmpty else { return }
            request += bytes
            if request.firstRange(of: end) != nil { break }
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

    static func response(status: String, type: String, body: [UInt8]) -> [UInt8] {
        Array("HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8) + body
    }
}

extension Array where Element == UInt8 {
    fileprivate func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}
#endif
