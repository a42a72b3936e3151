import BleotaCodec
import Foundation

/// nRF Connect SDK's DFU package: the `build/dfu_application.zip` an NCS build makes (the usual
/// input of nRF Connect Device Manager), holding MCUboot images and a `manifest.json` that says
/// which image (core) and slot each is for.
///
/// The schema is sdk-nrf's `scripts/bootloader/generate_zip.py` (written by `cmake/fw_zip.cmake`
/// and, with sysbuild, `cmake/sysbuild/zip.cmake`): a top level of `format-version` (0 before
/// sysbuild, 1 since), `time` and `files`; per file `file`, `size`, `image_index`,
/// `slot_index_primary`/`slot_index_secondary` (swap modes) or `slot` (direct-XIP, image × 2 + 0
/// or 1), `load_address`, `version_MCUBOOT` (or `version_MCUBOOT+XIP` for a direct-XIP pair),
/// `type`, `board`, `soc`. The script writes every value as a string unless it starts with `0x`,
/// which becomes a number; both are read here. File names differ by build system (before
/// sysbuild `app_update.bin`, `net_core_app_update.bin`, `mcuboot_secondary_app_update.bin`; with
/// it `<app>.bin` or `.signed.bin`, `ipc_radio.bin`, `mcuboot_secondary_app.bin`, `nrf70.bin`),
/// so the manifest, never the name, says what a file is.
///
/// Every image's MCUboot header is checked against its entry (version, size, the slot a ROM-fixed
/// image is linked for) when the package is read, before anything connects.
package struct NCSDFUPackage: Sendable {
    package struct Image: Sendable {
        /// The member's name in the zip.
        package var file: String
        /// MCUboot's image number: 0 the application core, 1 an nRF5340's network core, ….
        package var imageIndex: Int
        /// For one variant of a direct-XIP pair: the slot (0 or 1) it is linked for; nil for the
        /// swap modes, where an image goes to its image's secondary slot.
        package var xipSlot: Int?
        /// The manifest's `board` (which core, for a two-core part).
        package var board: String?
        package var bytes: [UInt8]
        package var mcuboot: MCUbootImage
    }

    package var formatVersion: Int
    package var images: [Image]

    /// The image numbers the package updates, in order.
    package var imageIndices: [Int] { Array(Set(images.map(\.imageIndex))).sorted() }

    /// Whether the zip at `path` is an NCS package (its manifest has `files`, not nrfutil's `manifest`);
    /// false for anything that does not read.
    package static func isPackage(at path: String, head: [UInt8]) -> Bool {
        guard NordicDFUPackage.startsLikePackage(head) else { return false }
        guard let file = try? InputFile.read(path, limit: UInt64(NordicDFUPackage.maximumArchiveSize)),
            let archive = try? ZipArchive(file),
            let member = archive.members.first(where: { $0.name == "manifest.json" }),
            let bytes = try? archive.contents(of: member, limit: 1 << 20),
            let top = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
        else { return false }
        return top["files"] is [Any] && top["manifest"] == nil
    }

    /// Reads and checks the package at `path`.
    package init(contentsOf path: String) throws(NCSPackageError) {
        let file: [UInt8]
        do { file = try InputFile.read(path, limit: UInt64(NordicDFUPackage.maximumArchiveSize)) } catch {
            throw NCSPackageError(message: error.description)
        }
        let archive: ZipArchive
        do { archive = try ZipArchive(file) } catch {
            throw NCSPackageError(path, "is not a readable zip archive (\(error)): give the dfu_application.zip the build wrote")
        }
        guard archive.members.count <= NordicDFUPackage.maximumMembers else {
            throw NCSPackageError(path, "lists \(archive.members.count) members, more than \(NordicDFUPackage.maximumMembers): not a DFU package")
        }
        func read(_ name: String) throws(NCSPackageError) -> [UInt8] {
            guard ZipArchive.isSafeMemberName(name) else {
                throw NCSPackageError(path, "the manifest names '\(ZipArchive.printable(name))', a path outside the package: refusing it")
            }
            guard let member = archive.members.first(where: { $0.name == name && !$0.isDirectory }) else {
                throw NCSPackageError(path, "the manifest names '\(ZipArchive.printable(name))' but the archive has no such member: build the package again")
            }
            do { return try archive.contents(of: member, limit: NordicDFUPackage.maximumMemberSize) } catch {
                throw NCSPackageError(path, "member '\(ZipArchive.printable(name))' is damaged (\(error)): build or download the package again")
            }
        }
        guard archive.members.contains(where: { $0.name == "manifest.json" }) else {
            throw NCSPackageError(
                path, "is a .zip without manifest.json, so not a DFU package: give the dfu_application.zip the nRF Connect SDK build wrote, or an image (.bin)")
        }
        let top: [String: Any]
        do {
            guard let object = try JSONSerialization.jsonObject(with: Data(try read("manifest.json"))) as? [String: Any] else {
                throw NCSPackageError(path, "manifest.json is not a JSON object: build the package again")
            }
            top = object
        } catch let error as NCSPackageError {
            throw error
        } catch {
            throw NCSPackageError(path, "manifest.json is not valid JSON: build the package again")
        }
        formatVersion = Self.integer(top["format-version"]) ?? 0
        guard let files = top["files"] as? [Any], !files.isEmpty else {
            throw NCSPackageError(path, "manifest.json lists no files: build the package again")
        }
        var images: [Image] = []
        for (number, listed) in files.enumerated() {
            guard let entry = listed as? [String: Any], let name = entry["file"] as? String else {
                throw NCSPackageError(path, "manifest.json's file \(number + 1) has no \"file\": build the package again")
            }
            let printable = ZipArchive.printable(name)
            let bytes = try read(name)
            let image: MCUbootImage
            do { image = try MCUbootImage(decoding: bytes) } catch {
                throw NCSPackageError(path, "\(printable) is not an MCUboot image (\(error)): the package holds something the build did not sign")
            }
            if let size = Self.integer(entry["size"]), size != bytes.count {
                throw NCSPackageError(path, "\(printable) holds \(bytes.count) bytes but the manifest says \(size): build the package again")
            }
            let index = Self.integer(entry["image_index"]) ?? 0
            guard (0...15).contains(index) else {
                throw NCSPackageError(path, "\(printable)'s image_index \(index) is not an MCUboot image number (0…15)")
            }
            let xip = entry["version_MCUBOOT+XIP"] != nil
            if let listedVersion = (entry["version_MCUBOOT+XIP"] ?? entry["version_MCUBOOT"]).flatMap(Self.text) {
                let expected = MCUbootImage.Version(parsing: listedVersion)
                guard expected == image.version else {
                    throw NCSPackageError(
                        path,
                        "\(printable)'s MCUboot header says version \(image.version) but the manifest says \(listedVersion): the image is not the one the package was made with")
                }
            }
            var xipSlot: Int?
            if xip {
                guard let slot = Self.integer(entry["slot"]) else {
                    throw NCSPackageError(path, "\(printable) is one of a direct-XIP pair but the manifest gives no slot: build the package again")
                }
                xipSlot = slot % 2
                if image.imageFlags.contains(.romFixed), let load = Self.integer(entry["load_address"]),
                    Int(image.loadAddress) != load, Int(image.loadAddress) + image.headerSize != load
                {
                    throw NCSPackageError(
                        path, "\(printable) is linked for 0x\(String(image.loadAddress, radix: 16)) (ROM-fixed) but the manifest loads it at 0x\(String(load, radix: 16))")
                }
            }
            images.append(
                Image(file: name, imageIndex: index, xipSlot: xipSlot, board: entry["board"] as? String, bytes: bytes, mcuboot: image))
        }
        for index in Set(images.map(\.imageIndex)) {
            let same = images.filter { $0.imageIndex == index }
            let slots = same.compactMap(\.xipSlot)
            guard same.count == 1 || (same.count == 2 && Set(slots) == [0, 1]) else {
                throw NCSPackageError(
                    path,
                    "lists \(same.count) files for image \(index) (\(same.map { ZipArchive.printable($0.file) }.joined(separator: ", "))): only a direct-XIP pair, one for each slot, may share an image"
                )
            }
        }
        self.images = images.sorted { ($0.imageIndex, $0.xipSlot ?? 0) < ($1.imageIndex, $1.xipSlot ?? 0) }
    }

    /// A manifest value as generate_zip.py writes it: a number, a decimal string or a 0x string.
    static func integer(_ value: Any?) -> Int? {
        if let number = value as? Int { return number }
        if let number = value as? NSNumber { return number.intValue }
        guard let text = value as? String else { return nil }
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.lowercased().hasPrefix("0x") { return Int(trimmed.dropFirst(2), radix: 16) }
        return Int(trimmed)
    }

    static func text(_ value: Any?) -> String? {
        if let text = value as? String { return text }
        if let number = value as? NSNumber { return number.stringValue }
        return nil
    }
}

/// Why an NCS package cannot be used: one line naming the file, the problem and the fix.
package struct NCSPackageError: Error, Sendable, Equatable, CustomStringConvertible {
    package var description: String
    package init(_ path: String, _ problem: String) { description = "\(path): \(problem)" }
    package init(message: String) { description = message }
}
