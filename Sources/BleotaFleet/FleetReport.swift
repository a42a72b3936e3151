import BleotaCodec
import Foundation

/// The per-device results of a fleet as `--report` writes them: CSV (one row
/// per device, a header first) or JSON (the summary and the devices).
public enum FleetReport {
    public enum Format: String, Sendable {
        case csv, json
        /// From the file name's extension: .csv or .json.
        public init?(path: String) {
            switch (path as NSString).pathExtension.lowercased() {
            case "csv": self = .csv
            case "json": self = .json
            default: return nil
            }
        }
    }

    static let columns = [
        "device", "label", "adapter", "outcome", "version_before", "version_after", "seconds", "bytes", "resends",
        "attempts", "error_step", "error", "device_state", "air_bytes",
    ]

    public static func csv(_ results: [DeviceResult]) -> String {
        func field(_ text: String?) -> String {
            guard let text else { return "" }
            // RFC 4180: quote a field with a comma, quote or line break; double its quotes.
            guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
            return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
        }
        var lines = [columns.joined(separator: ",")]
        for result in results {
            lines.append(
                [
                    result.device, result.label, result.adapter, result.outcome.rawValue, result.versionBefore, result.versionAfter,
                    String(format: "%.3f", result.seconds), String(result.bytes), String(result.resends), String(result.attempts),
                    result.step, result.error, result.deviceState, result.airBytes.map(String.init),
                ].map(field).joined(separator: ","))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    struct Document: Codable {
        var summary: FleetSummary
        var devices: [DeviceResult]
    }

    public static func json(_ results: [DeviceResult], summary: FleetSummary) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return String(decoding: try encoder.encode(Document(summary: summary, devices: results)), as: UTF8.self) + "\n"
    }
}
