import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaSystem
import Foundation

/// `--no-image-store`, as `flash`, `fleet flash` and `fleet worker` take it.
struct ImageStoreOption: ParsableArguments {
    @Flag(
        name: .customLong("no-image-store"),
        help: "Neither look for a delta base among the images bleota flashed before ($XDG_DATA_HOME/bleota/images) nor keep a copy of this one.")
    var disabled = false

    /// The store of the user running bleota; nil with --no-image-store.
    var store: ImageStore? { disabled ? nil : ImageStore() }
}

/// The images `flash` has sent, kept by SHA-256, so that the next flash to a device that runs
/// one of them can send a delta patch without `--base` (protocols/delta.md, "Where the base
/// comes from").
///
/// It lives in `$XDG_DATA_HOME/bleota/images` (`~/.local/share/bleota/images`): data bleota
/// made and would miss, not configuration and not a cache a user clears. Each image is one
/// file, `<sha256 hex>.bin`, written atomically; reading one checks its hash, so a damaged or
/// edited copy is never taken for a base. The store holds at most ``capacity`` bytes: adding
/// an image removes the least recently used ones beyond that (a lookup counts as a use).
struct ImageStore: DeltaBaseStore {
    /// 64 MiB: a few dozen releases of a typical BLE device's firmware.
    static let defaultCapacity = 64 << 20

    let directory: String
    let capacity: Int

    init(directory: String, capacity: Int = ImageStore.defaultCapacity) {
        self.directory = directory
        self.capacity = capacity
    }

    /// The store of the user running bleota, as the XDG base directory specification places it.
    init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        let base =
            environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.local/share")
        self.init(directory: base + "/bleota/images")
    }

    var location: String { directory }

    func path(for sha256: [UInt8]) -> String { directory + "/" + sha256.hexString + ".bin" }

    func image(sha256: [UInt8]) -> [UInt8]? {
        guard sha256.count == 32 else { return nil }
        let path = path(for: sha256)
        guard let bytes = try? InputFile.read(path, limit: UInt64(capacity)), SHA256Digest.hash(bytes) == sha256 else { return nil }
        markUsed(path)
        return bytes
    }

    /// Keeps `bytes` (an image larger than the whole store is not kept), then removes the least
    /// recently used images beyond the capacity; returns the paths it removed.
    @discardableResult
    func add(_ bytes: [UInt8]) throws(ImageStoreError) -> [String] {
        guard bytes.count <= capacity else { return [] }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw ImageStoreError(description: "cannot create \(directory): \((error as NSError).localizedDescription)")
        }
        let hash = SHA256Digest.hash(bytes)
        let path = path(for: hash)
        if image(sha256: hash) == nil {
            do { try AtomicFile.write(bytes, to: path) } catch {
                throw ImageStoreError(description: "cannot write \(path): \(String(cString: strerror(error.code)))")
            }
        }
        return removeLeastRecentlyUsed(keeping: path)
    }

    /// The images held, most recently used first.
    func entries() -> [(path: String, size: Int, used: Date)] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.compactMap { name -> (path: String, size: Int, used: Date)? in
            guard Self.isImageName(name) else { return nil }
            let path = directory + "/" + name
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
                let size = attributes[.size] as? Int, let used = attributes[.modificationDate] as? Date
            else { return nil }
            return (path, size, used)
        }
        .sorted { $0.used != $1.used ? $0.used > $1.used : $0.path < $1.path }
    }

    /// Only the store's own files: 64 hex digits and `.bin` (not the temporary files of a write).
    static func isImageName(_ name: String) -> Bool {
        name.count == 68 && name.hasSuffix(".bin") && name.prefix(64).allSatisfy { $0.isHexDigit && !$0.isUppercase }
    }

    private func removeLeastRecentlyUsed(keeping kept: String) -> [String] {
        let held = entries()
        // The image just added counts first, whatever the file system's clock made of its use.
        var total = held.first(where: { $0.path == kept })?.size ?? 0
        var removed: [String] = []
        for entry in held where entry.path != kept {
            total += entry.size
            guard total > capacity else { continue }
            if (try? FileManager.default.removeItem(atPath: entry.path)) != nil {
                removed.append(entry.path)
                total -= entry.size
            }
        }
        return removed
    }

    private func markUsed(_ path: String) {
        try? FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: path)
    }
}

/// Why the store could not keep an image: one line naming the path.
struct ImageStoreError: Error, CustomStringConvertible {
    var description: String
}
