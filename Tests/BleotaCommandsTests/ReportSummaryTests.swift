import BleotaEngine
import Testing

@testable import BleotaCommands

/// The one line a flash ends with: what the rate is a share of.
@Suite struct ReportSummaryTests {
    static func report(bytes: Int, streamBytes: Int, seconds: Double) -> UpdateReport {
        var report = UpdateReport(
            operation: "flash", device: "sim://2m-dle", bytes: bytes, streamBytes: streamBytes, compressed: streamBytes < bytes,
            packetSize: 239, transferSeconds: seconds, totalSeconds: seconds + 1, statistics: TransferStatistics(),
            stepSeconds: [:], tuning: TransferTuning())
        report.linkCapacity = 130_150
        return report
    }

    /// A compressed stream delivers the image faster than the link carries bytes: the share of
    /// the link is of what was sent, not "142 % of the link" (issue 48, item 17).
    @Test func aCompressedTransferSaysWhatWasSentAndItsShareOfTheLink() {
        let line = summary(Self.report(bytes: 184_627, streamBytes: 92_314, seconds: 1))
        #expect(line.hasPrefix("1.0 s transfer (180.3 KiB/s of image; 90.2 KiB/s sent, 71% of the link's 127.1 KiB/s), 2.0 s in all"), "\(line)")
        #expect(line.hasSuffix("compressed to 90.2 KiB"), "\(line)")
    }

    @Test func anUncompressedTransferIsAShareOfTheLink() {
        let line = summary(Self.report(bytes: 65_075, streamBytes: 65_075, seconds: 1))
        #expect(line.hasPrefix("1.0 s transfer (63.5 KiB/s, 50% of the link's 127.1 KiB/s)"), "\(line)")
    }
}
