import BleotaCodec
import Foundation
import Testing

@testable import BleotaCommands

/// The store of flashed images that delta patches take their base from: found by hash, checked
/// on reading, and kept under its capacity by removing the least recently used.
@Suite struct ImageStoreTests {
    static func directory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-image-store-\(UUID().uuidString)").path
        return path
    }

    static func image(_ fill: UInt8, _ count: Int) -> [UInt8] { [UInt8](repeating: fill, count: count) }

    /// Sets a kept image's last use, so the order of uses does not depend on the file system's clock.
    static func setUsed(_ store: ImageStore, _ bytes: [UInt8], secondsAgo: Double) throws {
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSinceNow: -secondsAgo)], ofItemAtPath: store.path(for: SHA256Digest.hash(bytes)))
    }

    @Test func anImageIsFoundByItsHashAndOnlyWhileItsBytesMatchIt() throws {
        let store = ImageStore(directory: try Self.directory())
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        let bytes = Self.image(0x5A, 1000)
        #expect(store.image(sha256: SHA256Digest.hash(bytes)) == nil, "nothing is held before an image is added")
        try store.add(bytes)
        #expect(store.image(sha256: SHA256Digest.hash(bytes)) == bytes)
        #expect(store.image(sha256: [0x01, 0x02]) == nil, "a hash of the wrong length finds nothing")

        var edited = bytes
        edited[3] = 0
        try Data(edited).write(to: URL(fileURLWithPath: store.path(for: SHA256Digest.hash(bytes))))
        #expect(store.image(sha256: SHA256Digest.hash(bytes)) == nil, "a copy that no longer matches its name is not a base")
        try store.add(bytes)
        #expect(store.image(sha256: SHA256Digest.hash(bytes)) == bytes, "adding the image again repairs the copy")
    }

    @Test func theLeastRecentlyUsedGoBeyondTheCapacityAndALookupCountsAsAUse() throws {
        let store = ImageStore(directory: try Self.directory(), capacity: 100)
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        let first = Self.image(1, 40), second = Self.image(2, 40), third = Self.image(3, 40)
        try store.add(first)
        try store.add(second)
        try Self.setUsed(store, first, secondsAgo: 300)
        try Self.setUsed(store, second, secondsAgo: 200)
        // The older of the two is used (looked up) now: the other is the least recently used.
        #expect(store.image(sha256: SHA256Digest.hash(first)) == first)
        let removed = try store.add(third)
        #expect(removed == [store.path(for: SHA256Digest.hash(second))])
        #expect(store.image(sha256: SHA256Digest.hash(second)) == nil)
        #expect(store.image(sha256: SHA256Digest.hash(first)) == first && store.image(sha256: SHA256Digest.hash(third)) == third)
        #expect(store.entries().reduce(0) { $0 + $1.size } <= store.capacity)
    }

    @Test func anImageLargerThanTheStoreIsNotKeptAndOtherFilesAreLeftAlone() throws {
        let store = ImageStore(directory: try Self.directory(), capacity: 100)
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        let other = store.directory + "/notes.txt"
        try Data(Self.image(7, 500)).write(to: URL(fileURLWithPath: other))
        #expect(try store.add(Self.image(9, 101)) == [])
        #expect(store.entries().isEmpty)
        try store.add(Self.image(8, 60))
        try store.add(Self.image(6, 60))
        #expect(store.entries().count == 1, "60 + 60 bytes exceed 100: the older goes")
        #expect(FileManager.default.fileExists(atPath: other), "a file that is not the store's own is never removed")
    }

    @Test func theStoreLivesUnderTheXDGDataDirectory() {
        #expect(ImageStore(environment: ["XDG_DATA_HOME": "/x/data", "HOME": "/home/u"]).directory == "/x/data/bleota/images")
        #expect(ImageStore(environment: ["XDG_DATA_HOME": "", "HOME": "/home/u"]).directory == "/home/u/.local/share/bleota/images")
    }

    /// flash with a store it cannot write: the update succeeds, and one warning says what that costs.
    @Test func flashWarnsOnceWhenItCannotKeepACopy() throws {
        let run = try BleotaProcess.run(
            ["flash", "samples/firmware/blinky.bin", "--device", "sim://2m-dle", "--no-saved-tuning"],
            environment: ["XDG_DATA_HOME": "/proc/bleota-cannot-be-here"])
        #expect(run.status == 0, "\(run.stderr)")
        let warnings = run.stderr.split(separator: "\n").filter { $0.hasPrefix("warning: ") }
        #expect(warnings.count == 1, "\(run.stderr)")
        #expect(
            warnings.first?.hasPrefix("warning: cannot create /proc/bleota-cannot-be-here/bleota/images") == true
                && warnings.first?.hasSuffix(": the next flash of this device sends the whole image unless given --base") == true,
            "\(run.stderr)")
    }

    /// A store that cannot be written is an error naming the path, which flash turns into a warning.
    @Test func aStoreThatCannotBeWrittenSaysWhere() {
        let store = ImageStore(directory: "/proc/bleota-cannot-be-here")
        #expect(throws: ImageStoreError.self) { try store.add(Self.image(1, 10)) }
        do {
            try store.add(Self.image(1, 10))
        } catch {
            #expect(error.description.hasPrefix("cannot create /proc/bleota-cannot-be-here"), "\(error)")
        }
    }
}
