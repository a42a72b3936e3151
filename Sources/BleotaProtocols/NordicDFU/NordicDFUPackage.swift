import BleotaCodec
import Foundation

/// A Nordic DFU package: the `.zip` that `nrfutil pkg generate` (Secure DFU)
/// or `adafruit-nrfutil dfu genpkg` (legacy DFU) writes, holding a
/// `manifest.json` and, per part, an image (`.bin`) and its init packet
/// (`.dat`). Read with ``/BleotaCodec/ZipArchive``, member by member, with limits: a
/// package comes from outside and may be hostile (paths that climb out, a
/// zip bomb, a deflate stream that never ends, members the manifest names
/// but the archive lacks).
package struct NordicDFUPackage: Sendable {
    /// The parts a manifest may name, in the order they are sent: the
    /// SoftDevice and bootloader (one image, or each alone) before the
    /// application, each in a connection of its own.
    package enum PartKind: String, Sendable, CaseIterable, CustomStringConvertible {
        case softDeviceBootloader = "softdevice_bootloader"
        case softDevice = "softdevice"
        case bootloader = "bootloader"
        case application = "application"

        package var description: String {
            switch self {
            case .softDeviceBootloader: "SoftDevice and bootloader"
            case .softDevice: "SoftDevice"
            case .bootloader: "bootloader"
            case .application: "application"
            }
        }
    }

    package struct Part: Sendable {
        package var kind: PartKind
        package var imageName: String
        package var initPacketName: String
        package var image: [UInt8]
        /// The `.dat` as stored: a protobuf ``NordicInitPacket`` for Secure DFU,
        /// a fixed little-endian record for legacy DFU.
        package var initPacketBytes: [UInt8]
        /// Decoded for a Secure DFU package; nil for legacy.
        package var initPacket: NordicInitPacket?
        /// For a SoftDevice+bootloader image: the sizes of each half (`info_read_only_metadata`).
        package var softDeviceSize: Int?
        package var bootloaderSize: Int?
    }

    /// Which DFU the package is for: `dfu_version` in the manifest marks a legacy package.
    package enum Flavour: Sendable, Equatable {
        case secure
        case legacy(dfuVersion: Double)
    }

    package var parts: [Part]
    package var flavour: Flavour

    /// Whether a file's first bytes are a zip's (a local file header, "PK\u{3}\u{4}").
    package static func startsLikePackage(_ head: [UInt8]) -> Bool { head.starts(with: [0x50, 0x4B, 0x03, 0x04]) }

    /// What a .zip without `manifest.json` is told.
    package static let notAPackage =
        "is a .zip without manifest.json, so not a Nordic DFU package: give the package nrfutil or adafruit-nrfutil made, or the image itself (.bin, .hex)"

    /// The flavour of the package at `path` when it is one that reads; nil otherwise
    /// (how the two Nordic protocols tell whose image a zip is).
    package static func flavour(ofPackageAt path: String, head: [UInt8]) -> Flavour? {
        guard startsLikePackage(head) else { return nil }
        return (try? NordicDFUPackage(contentsOf: path))?.flavour
    }

    /// Whether the zip at `path` has a `manifest.json` that is a JSON object without nrfutil's
    /// `manifest` object: another tool's package (nRF Connect SDK's `dfu_application.zip`), not a
    /// damaged Nordic one.
    package static func hasForeignManifest(at path: String) -> Bool {
        guard let file = try? InputFile.read(path, limit: UInt64(maximumArchiveSize)), let archive = try? ZipArchive(file),
            let member = archive.members.first(where: { $0.name == "manifest.json" }),
            let bytes = try? archive.contents(of: member, limit: 1 << 20),
            let top = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
        else { return false }
        return top["manifest"] == nil
    }

    /// The largest member read: Nordic's largest flash is 1 MiB (nRF52840), so
    /// 16 MiB leaves room for any real image and none for a bomb.
    package static let maximumMemberSize = 16 << 20
    /// The most members an archive may list.
    package static let maximumMembers = 64
    /// The largest package file read: a few members of at most 16 MiB, compressed.
    package static let maximumArchiveSize = 64 << 20

    /// Reads and checks the package at `path`: the manifest, every member it
    /// names, and for Secure DFU each init packet's encoding.
    package init(contentsOf path: String) throws(NordicPackageError) {
        // Only a regular file is read (a FIFO would hang, a device read forever), and only a small one.
        let file: [UInt8]
        do { file = try InputFile.read(path, limit: UInt64(Self.maximumArchiveSize)) } catch { throw NordicPackageError(message: error.description) }
        let archive: ZipArchive
        do {
            archive = try ZipArchive(file)
        } catch {
            throw NordicPackageError(path, "is not a readable zip archive (\(error)): give the .zip that nrfutil pkg generate or adafruit-nrfutil dfu genpkg wrote")
        }
        guard archive.members.count <= Self.maximumMembers else {
            throw NordicPackageError(path, "lists \(archive.members.count) members, more than \(Self.maximumMembers): not a DFU package")
        }
        var entries: [String: ZipArchive.Member] = [:]
        for member in archive.members {
            guard Self.isSafeMemberName(member.name) else {
                throw NordicPackageError(path, "member '\(Self.printable(member.name))' names a path outside the package (absolute or with ..): refusing it")
            }
            if !member.isDirectory { entries[member.name] = member }
        }
        func read(_ name: String) throws(NordicPackageError) -> [UInt8] {
            guard Self.isSafeMemberName(name) else {
                throw NordicPackageError(path, "the manifest names '\(Self.printable(name))', a path outside the package: refusing it")
            }
            guard let member = entries[name] else {
                throw NordicPackageError(path, "the manifest names '\(Self.printable(name))' but the archive has no such member: regenerate the package")
            }
            guard member.size <= Self.maximumMemberSize else {
                throw NordicPackageError(path, "member '\(Self.printable(name))' unpacks to \(member.size) bytes, more than \(Self.maximumMemberSize): not a firmware image")
            }
            do {
                return try archive.contents(of: member, limit: Self.maximumMemberSize)
            } catch {
                throw NordicPackageError(path, "member '\(Self.printable(name))' is damaged (\(error)): regenerate or download the package again")
            }
        }

        // A zip without a manifest is some other archive, not a damaged package: say so, in the
        // one message flash, image info and image convert all give.
        guard entries["manifest.json"] != nil else { throw NordicPackageError(message: "\(path) \(Self.notAPackage)") }
        let manifestBytes = try read("manifest.json")
        let manifest: [String: Any]
        do {
            guard let top = try JSONSerialization.jsonObject(with: Data(manifestBytes)) as? [String: Any],
                let inner = top["manifest"] as? [String: Any]
            else {
                throw NordicPackageError(path, "manifest.json has no \"manifest\" object: not an nrfutil package")
            }
            manifest = inner
        } catch let error as NordicPackageError {
            throw error
        } catch {
            throw NordicPackageError(path, "manifest.json is not valid JSON: regenerate the package")
        }
        if let version = manifest["dfu_version"] {
            guard let number = (version as? NSNumber)?.doubleValue else {
                throw NordicPackageError(path, "manifest.json's dfu_version is not a number")
            }
            flavour = .legacy(dfuVersion: number)
        } else {
            flavour = .secure
        }

        var parts: [Part] = []
        for kind in PartKind.allCases {
            guard let entry = manifest[kind.rawValue] else { continue }
            guard let object = entry as? [String: Any],
                let imageName = object["bin_file"] as? String, let initPacketName = object["dat_file"] as? String
            else {
                throw NordicPackageError(path, "manifest.json's \(kind.rawValue) lacks bin_file or dat_file: regenerate the package")
            }
            let image = try read(imageName)
            let initPacketBytes = try read(initPacketName)
            guard !image.isEmpty else { throw NordicPackageError(path, "\(imageName) is empty: regenerate the package") }
            var part = Part(
                kind: kind, imageName: imageName, initPacketName: initPacketName, image: image,
                initPacketBytes: initPacketBytes, initPacket: nil)
            // nrfutil puts the sizes under info_read_only_metadata; adafruit-nrfutil on the part itself.
            let metadata = object["info_read_only_metadata"] as? [String: Any] ?? object
            part.softDeviceSize = (metadata["sd_size"] as? NSNumber)?.intValue
            part.bootloaderSize = (metadata["bl_size"] as? NSNumber)?.intValue
            if flavour == .secure {
                do {
                    part.initPacket = try NordicInitPacket(decoding: initPacketBytes)
                } catch {
                    throw NordicPackageError(path, "\(initPacketName): \(error): regenerate the package with nrfutil pkg generate")
                }
            }
            parts.append(part)
        }
        guard !parts.isEmpty else {
            throw NordicPackageError(path, "manifest.json names no application, bootloader or SoftDevice: nothing to flash")
        }
        self.parts = parts
    }

    static func isSafeMemberName(_ name: String) -> Bool { ZipArchive.isSafeMemberName(name) }
    static func printable(_ name: String) -> String { ZipArchive.printable(name) }
}

/// Why a package cannot be used: one line naming the file, the problem and the fix.
package struct NordicPackageError: Error, Sendable, Equatable, CustomStringConvertible {
    package var description: String

    /// "`path`: `problem`".
    package init(_ path: String, _ problem: String) { description = "\(path): \(problem)" }

    /// A message that names the file itself.
    package init(message: String) { description = message }
}
