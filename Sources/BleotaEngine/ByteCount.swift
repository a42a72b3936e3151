import Foundation

/// Byte counts as people read them, the same in every report: "812 B", "143.9 KiB", "2.81 MiB".
public enum ByteCount {
    public static func text(_ bytes: Int) -> String {
        let value = Double(bytes)
        if value < 1024 { return "\(bytes) B" }
        if value < 1024 * 1024 { return String(format: "%.1f KiB", value / 1024) }
        return String(format: "%.2f MiB", value / 1024 / 1024)
    }
}
