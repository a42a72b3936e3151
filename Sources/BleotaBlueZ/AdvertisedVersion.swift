import BleotaCodec

/// A firmware version carried in an advertisement, so that a fleet can pick the
/// devices that need an update from a scan, without connecting to each.
///
/// Bluetooth defines no field for it, so bleota defines one on the
/// manufacturer-specific data (AD type 0xFF, Core Specification Supplement,
/// Part A, §1.4): after the 2-byte company identifier, the marker `bV`
/// (0x62 0x56), then MCUboot's version layout — major, minor, revision
/// (little-endian 16 bits) and optionally the build number (little-endian 32
/// bits). The company is the vendor's own identifier; `bleota serve` uses 0xFFFF,
/// which the Bluetooth SIG reserves for tests. `protocols/advertised-version.md`
/// describes the format for firmware authors.
public enum AdvertisedVersion {
    /// The two bytes that say the rest is a version.
    public static let marker: [UInt8] = [0x62, 0x56]
    /// The company identifier the SIG reserves for tests (used by `bleota serve`).
    public static let testCompany: UInt16 = 0xFFFF

    /// The manufacturer data payload after the company: the marker and the version
    /// (the build number only when it is not 0).
    public static func payload(_ version: MCUbootImage.Version) -> [UInt8] {
        var writer = ByteWriter(capacity: 10)
        writer.write(contentsOf: marker)
        writer.write(version.major)
        writer.write(version.minor)
        writer.write(version.revision)
        if version.build != 0 { writer.write(version.build) }
        return writer.bytes
    }

    /// The whole AD structure: length, type 0xFF, company (little-endian) and ``payload(_:)``.
    public static func structure(_ version: MCUbootImage.Version, company: UInt16 = testCompany) -> [UInt8] {
        var body = ByteWriter(capacity: 12)
        body.write(company)
        body.write(contentsOf: payload(version))
        return [UInt8(body.bytes.count + 1), 0xFF] + body.bytes
    }

    /// The version in a manufacturer data payload (after the company), or nil when it
    /// is not one: no marker, or not 4 or 8 bytes after it.
    public static func decode(_ payload: [UInt8]) -> MCUbootImage.Version? {
        guard payload.count == marker.count + 4 || payload.count == marker.count + 8,
            Array(payload.prefix(marker.count)) == marker
        else { return nil }
        var reader = ByteReader(Array(payload.dropFirst(marker.count)))
        guard let major = try? reader.readUInt8("major"), let minor = try? reader.readUInt8("minor"),
            let revision = try? reader.readUInt16(.little, "revision")
        else { return nil }
        let build = reader.remaining == 4 ? (try? reader.readUInt32(.little, "build")) ?? 0 : 0
        return MCUbootImage.Version(major: major, minor: minor, revision: revision, build: build)
    }
}
