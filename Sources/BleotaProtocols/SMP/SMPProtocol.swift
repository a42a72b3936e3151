import BleotaATT
import BleotaCodec
import BleotaEngine
import BleotaLink

/// MCUmgr's Simple Management Protocol with MCUboot (Zephyr, nRF Connect
/// SDK), as a registered protocol: over BLE (its GATT service), UDP, a serial
/// console and the simulator. Wire format: protocols/smp.md and protocols/mcuboot.md.
public struct SMPProtocol: UpdateProtocol {
    public static let name = "smp"
    /// MCUmgr's SMP GATT service: one characteristic, written without response and notifying.
    public static let gattService = GATTPacketService(
        service: BluetoothUUID("8D53DC1D-1DB7-4CD3-868B-8A527460AA84")!,
        write: BluetoothUUID("DA2E7828-FBCE-4E01-AE9E-261174997C48")!,
        notify: BluetoothUUID("DA2E7828-FBCE-4E01-AE9E-261174997C48")!,
        name: "MCUmgr SMP")

    public init() {}

    public var identity: ProtocolIdentity {
        ProtocolIdentity(
            name: Self.name, displayName: "SMP (MCUmgr)",
            summary: "MCUmgr's Simple Management Protocol with MCUboot (Zephyr, nRF Connect SDK)",
            gattServices: [Self.gattService], transports: [.ble, .simulator, .udp, .serial],
            imageFormats: ["MCUboot (.bin signed by imgtool)", "nRF Connect SDK DFU package (dfu_application.zip)"])
    }

    public var capabilities: ProtocolCapabilities {
        [.flash, .push, .pull, .imageState, .echo, .reset, .eraseStaging, .refuseDowngrade, .multipleImages, .testTransfer, .versionCohort]
    }

    public var flashModes: [FlashMode] { [.testAndConfirm, .test, .confirm, .upload] }

    /// `tune` uploads a real image to the secondary slot and never marks it: an MCUmgr device takes
    /// nothing else (its upload is checked as an MCUboot image from the first request).
    public var testTransferNeedsImage: Bool { true }

    public var tuningKnobs: [TuningKnob: String] {
        [
            .window: "upload requests in flight (default: the device's buffer count − 1)",
            .packetSize: "data bytes per upload request (default: what the device's buffer and the link's packets allow)",
        ]
    }

    /// How many images the simulated device updates, and whether image 1's running slot is listed.
    enum ImagesShape: Sendable { case one, networkCore, listedSecondImage }

    /// The simulated device's options.
    enum DeviceOptions {
        static let bufferSize = ProtocolOption.integer(
            "smp-buffer", meaning: "SMP device's buffer size in bytes (its MCUmgr buf_size, 128…65535)", range: 128...65_535, default: 2475,
            serveOption: "smp-buffer")
        static let bufferCount = ProtocolOption.integer(
            "smp-buffers", meaning: "SMP device's buffer count (its MCUmgr buf_count, 1…64)", range: 1...64, default: 4, serveOption: "smp-buffers")
        static let swapTime = ProtocolOption.milliseconds(
            "swap-time", meaning: "MCUboot swap time in ms after a reset with an update pending", range: 0...3_600_000, default: .seconds(2),
            serveOption: "swap-time")
        static let confirmFailures = ProtocolOption.integer(
            "confirm-fails", meaning: "this many confirms of a test image fail to write MCUboot's trailer (img_mgmt's flash write error), 0…1000",
            range: 0...1000, default: 0)
        static let resetDelay = ProtocolOption.milliseconds(
            "reset-delay",
            meaning: "ms between answering a reset and resetting, the old image answering meanwhile (Zephyr's CONFIG_MCUMGR_GRP_OS_RESET_MS, 250 by default)",
            range: 0...60_000, default: .milliseconds(250))
        static let stallAt = ProtocolOption.integer(
            "stall-at", meaning: "upload bytes after which the device stops processing requests once for stall-time (its buffers then run out: ENOMEM)",
            range: 0...Int(UInt32.max), default: -1)
        static let decompress = ProtocolOption.choice(
            "decompress",
            meaning:
                "1: the bootloader decompresses compressed images and reports their decompressed SHA once they run (nRF Connect SDK's MCUboot); 0: it does not (upstream MCUboot)",
            ["0": false, "1": true], default: false)
        static let slotInfo = ProtocolOption.choice(
            "slot-info", meaning: "1: the device answers slot info (image group command 6, Zephyr's CONFIG_MCUMGR_GRP_IMG_SLOT_INFO); 0: it answers \"not supported\"",
            ["0": false, "1": true], default: true)
        static let images = ProtocolOption.choice(
            "images",
            meaning:
                "2: a two-core part as an nRF5340 (image 1 the network core: upgrade-only, no slot 0 listed, 256 KiB slots, its update skipped when image 0 is marked first as NCSDK-34106 has it); 2-listed: the same with image 1's running slot 0 listed; 1: one image",
            ["1": ImagesShape.one, "2": .networkCore, "2-listed": .listedSecondImage], default: .one)
        static let mcubootMode = ProtocolOption.choice(
            "mcuboot-mode",
            meaning:
                "the mode MCUboot is built for, as bootloader info reports it: swap-scratch (1, the default), swap-move (3), swap-offset (9): test, confirm or revert; overwrite-only (2): copied over, no revert; direct-xip (4): slots at 0xC000 and 0x82000 run in place, an image only from the slot it is linked for, the highest version boots, no marks; direct-xip-revert (5): the same, marked test and confirmed or back; ram-load (6): the highest version is run from RAM; firmware-loader (7): a reset with boot_mode 1 starts the loader (0.1.0, at the next address), which writes an upload over the application, nothing marked; single-slot (0), single-slot-ram-load (8): no slot for an upload",
            [
                "single-slot": SMPDeviceStorage.MCUbootMode.singleSlot, "swap-scratch": .swapScratch, "overwrite-only": .overwriteOnly,
                "swap-move": .swapMove, "direct-xip": .directXIP, "direct-xip-revert": .directXIPRevert, "ram-load": .ramLoad,
                "firmware-loader": .firmwareLoader, "single-slot-ram-load": .singleSlotRAMLoad, "swap-offset": .swapOffset,
            ], default: .swapScratch, noun: "an MCUboot mode")
        static let decryptionKey = ProtocolOption.choice(
            "decrypt-key",
            meaning:
                "the private key MCUboot holds for encrypted images: ecies-p256 (key TLV 0x32), x25519 (0x33), kw (AES key wrap, 0x31), rsa (0x30), none (an encrypted image fails validation and is erased), any (the default: whatever each image was encrypted for)",
            [
                "any": SMPDeviceStorage.Decryption.any, "none": .none, "ecies-p256": .key(0x32), "x25519": .key(0x33), "kw": .key(0x31),
                "rsa": .key(0x30),
            ], default: .any, noun: "a key kind")
        static let loaderName = ProtocolOption.text(
            "loader-name", meaning: "the name the firmware loader (mcuboot-mode=firmware-loader) advertises; by default the bootloader's name at the next address")
        static let stallTime = ProtocolOption.milliseconds(
            "stall-time", meaning: "how long the stall of stall-at lasts, in ms (default 5000)", range: 0...600_000, default: .seconds(5))
    }

    public var deviceOptions: [DeviceOptionSpec] {
        [
            DeviceOptions.bufferSize.deviceSpec, DeviceOptions.bufferCount.deviceSpec, DeviceOptions.swapTime.deviceSpec, DeviceOptions.confirmFailures.deviceSpec,
            DeviceOptions.resetDelay.deviceSpec, DeviceOptions.stallAt.deviceSpec, DeviceOptions.stallTime.deviceSpec,
            DeviceOptions.decompress.deviceSpec, DeviceOptions.slotInfo.deviceSpec, DeviceOptions.images.deviceSpec,
            DeviceOptions.mcubootMode.deviceSpec, DeviceOptions.decryptionKey.deviceSpec, DeviceOptions.loaderName.deviceSpec,
        ]
    }

    public func imageAffinity(_ probe: ImageProbe) -> ImageAffinity {
        if MCUbootImage.startsWithMagic(probe.head) { return .owns }
        return NCSDFUPackage.isPackage(at: probe.path, head: probe.head) ? .owns : .refuses
    }

    /// The part attribute that names MCUboot's image (core) a part is for (`flash --image N`, or a
    /// package's `image_index`); absent: image 0.
    public static let imageNumberAttribute = "image"
    /// The part attribute of one variant of a direct-XIP pair: the slot (0 or 1) it is linked for.
    /// Of two variants of an image the host sends the one for the slot the device does not run.
    public static let xipSlotAttribute = "xip-slot"

    public func prepareImage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        if !request.xipVariants.isEmpty { return try Self.prepareXIPPair(request) }
        if NordicDFUPackage.startsLikePackage(ImageFiles.probe(request.path).head) { return try Self.preparePackage(request) }
        var prepared = try Self.prepare(try ImageFiles.read(request.path), path: request.path, keyPath: request.keyPath)
        if let number = request.imageNumber {
            prepared.parts[0].attributes[Self.imageNumberAttribute] = number
            prepared.parts[0].name = "image \(number)"
            prepared.summary = "image \(number): " + prepared.summary
        }
        return prepared
    }

    /// `flash --xip-pair A B`: the two variants of a direct-XIP image, each checked, both ROM-fixed
    /// (linked for a slot's address) with the same version; the lower address is slot 0's.
    static func prepareXIPPair(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        guard request.xipVariants.count == 2 else {
            throw TransferError(.badInput, step: .load, "--xip-pair takes two images, one linked for each slot")
        }
        var variants: [(path: String, bytes: [UInt8], image: MCUbootImage, summary: String)] = []
        for path in request.xipVariants {
            let bytes = try ImageFiles.read(path)
            let prepared = try prepare(bytes, path: path, keyPath: request.keyPath)
            let image: MCUbootImage
            do { image = try MCUbootImage(decoding: bytes) } catch { throw TransferError(.badInput, step: .load, "\(path): \(error)") }
            guard image.imageFlags.contains(.romFixed) else {
                throw TransferError(
                    .badInput, step: .load,
                    "\(path) is not linked for a slot (no ROM_FIXED flag): a direct-XIP pair is two images signed with imgtool --rom-fixed, one for each slot's address")
            }
            variants.append((path, bytes, image, prepared.summary))
        }
        variants.sort { $0.image.loadAddress < $1.image.loadAddress }
        guard variants[0].image.loadAddress != variants[1].image.loadAddress else {
            throw TransferError(
                .badInput, step: .load,
                "\(variants[0].path) and \(variants[1].path) are both linked for 0x\(String(variants[0].image.loadAddress, radix: 16)): a direct-XIP pair has one image for each slot"
            )
        }
        guard variants[0].image.version == variants[1].image.version else {
            throw TransferError(
                .badInput, step: .load,
                "\(variants[0].path) is \(variants[0].image.version) but \(variants[1].path) is \(variants[1].image.version): the two variants of one image have one version")
        }
        let parts = variants.enumerated().map { slot, variant in
            PreparedImage.Part(
                name: "image 0 (\(variant.path), slot \(slot))", data: variant.bytes,
                attributes: [imageNumberAttribute: 0, xipSlotAttribute: slot])
        }
        return PreparedImage(
            parts: parts, version: variants[0].image.version.description,
            summary: "direct-XIP pair: " + variants.enumerated().map { "\($1.path) for slot \($0), \($1.summary)" }.joined(separator: "; "))
    }

    /// An nRF Connect SDK package, checked whole before anything connects: each image goes to its
    /// image's (core's) secondary slot, all in one update; of a direct-XIP pair, the variant for the
    /// slot the device does not run (picked at connect).
    static func preparePackage(_ request: ImageRequest) throws(TransferError) -> PreparedImage {
        let package: NCSDFUPackage
        do { package = try NCSDFUPackage(contentsOf: request.path) } catch { throw TransferError(.badInput, step: .load, error.description) }
        var parts: [PreparedImage.Part] = []
        var summaries: [String] = []
        for image in package.images {
            let prepared = try prepare(image.bytes, path: "\(request.path): \(image.file)", keyPath: request.keyPath)
            var attributes = [imageNumberAttribute: image.imageIndex]
            if let slot = image.xipSlot { attributes[xipSlotAttribute] = slot }
            parts.append(
                PreparedImage.Part(
                    name: "image \(image.imageIndex) (\(image.file))", data: image.bytes, attributes: attributes))
            summaries.append(
                "\(image.file) for image \(image.imageIndex)\(image.xipSlot.map { " in slot \($0) (direct-XIP)" } ?? ""), \(prepared.summary)")
        }
        if let number = request.imageNumber {
            let only = parts.filter { $0.attributes[imageNumberAttribute] == number }
            guard !only.isEmpty else {
                throw TransferError(
                    .badInput, step: .load,
                    "--image \(number): \(request.path) has no image \(number) (it has \(package.imageIndices.map(String.init).joined(separator: ", "))): give one of those, or no --image to update every image"
                )
            }
            parts = only
        }
        // A dependency on another image of the package is checked here, before anything connects.
        if request.imageNumber == nil {
            for image in package.images {
                for dependency in image.mcuboot.dependencies {
                    guard let other = package.images.first(where: { $0.imageIndex == dependency.image }),
                        other.mcuboot.version < dependency.minimumVersion
                    else { continue }
                    throw TransferError(
                        .badInput, step: .load,
                        "\(request.path): \(image.file) (image \(image.imageIndex)) needs \(dependency), but the package's \(other.file) is \(other.mcuboot.version): MCUboot would refuse it at boot; build the package again with matching images"
                    )
                }
            }
        }
        let lead = package.images.first { $0.imageIndex == (request.imageNumber ?? 0) } ?? package.images[0]
        return PreparedImage(
            parts: parts, version: lead.mcuboot.version.description,
            summary: "nRF Connect SDK package \(request.path): " + summaries.joined(separator: "; "))
    }

    /// Checks an MCUboot image before anything connects: the hash TLV always,
    /// the signature when a key is given.
    public static func prepare(_ bytes: [UInt8], path: String, keyPath: String?) throws(TransferError) -> PreparedImage {
        let image: MCUbootImage
        do { image = try MCUbootImage(decoding: bytes) } catch {
            throw TransferError(
                .badInput, step: .load,
                "\(path) is not an MCUboot image (\(error)): sign it with imgtool, or flash it with a protocol that takes plain images")
        }
        do { try image.verifyHash() } catch { throw TransferError(.verificationFailed, step: .load, "\(path): \(error)") }
        if let keyPath {
            let keyBytes = try ImageFiles.read(keyPath)
            do {
                let key = try MCUbootPublicKey(keyBytes)
                try image.verifySignature(with: key)
            } catch {
                throw TransferError(.verificationFailed, step: .load, "\(path): \(error)")
            }
        }
        return PreparedImage(
            bytes: bytes, version: image.version.description,
            summary: "MCUboot image \(image.version), hash \(image.hashTLV?.hexString ?? "?")")
    }

    public func frame(serial lines: any DelimitedByteStream) -> any Link { SMPSerialLink(lines: lines) }

    /// The host's options.
    enum HostOptions {
        static let loaderName = ProtocolOption.text(
            "loader-name",
            meaning:
                "the name MCUboot's firmware loader advertises (an NCS loader's FL_…), when it comes up at an address of its own: bleota then finds it by that name")
    }

    public var hostOptions: [HostOptionSpec] { [HostOptions.loaderName.hostSpec] }

    public func makeHost(_ context: HostContext) -> any ProtocolHost {
        SMPUpdater(context: context, explicitKnobs: context.explicitKnobs)
    }

    public func makeDevice(_ configuration: DeviceConfiguration) throws(DeviceConfigurationError) -> any DeviceHalf {
        let bufferSize = configuration.options[DeviceOptions.bufferSize]
        let bufferCount = configuration.options[DeviceOptions.bufferCount]
        let confirmFailures = configuration.options[DeviceOptions.confirmFailures]
        let swapTime = configuration.options[DeviceOptions.swapTime]
        let resetDelay = configuration.options[DeviceOptions.resetDelay]
        let stallAt = configuration.options[DeviceOptions.stallAt]
        let stallTime = configuration.options[DeviceOptions.stallTime]
        let version = MCUbootImage.Version(parsing: configuration.initialVersion)
        let shape = configuration.options[DeviceOptions.images]
        let networkCore =
            shape == .one
            ? nil
            : SMPDeviceStorage.NetworkCore(
                running: SMPDevice.factoryImage(version: version, size: 16 * 1024), slotSize: 256 * 1024, listsRunning: shape == .listedSecondImage)
        let mode = configuration.options[DeviceOptions.mcubootMode]
        let directXIP = mode.inPlace
        let storage = SMPDeviceStorage(
            primary: SMPDevice.factoryImage(
                version: version, linkedAt: mode == .directXIP || mode == .directXIPRevert ? SMPDeviceStorage.DirectXIP.slotAddresses[0] : nil),
            slotSize: directXIP == nil ? configuration.slotSize : SMPDeviceStorage.DirectXIP.slotSize,
            decompresses: configuration.options[DeviceOptions.decompress], networkCore: networkCore, directXIP: directXIP)
        let loader = mode == .firmwareLoader
        let decryption = configuration.options[DeviceOptions.decryptionKey]
        storage.withState { state in
            state.mode = mode
            state.decryption = decryption
            for (name, bytes) in configuration.files { state.files[SMPUpdater.devicePath(name)] = bytes }
            if loader { state.firmwareLoader = SMPDevice.factoryImage(version: MCUbootImage.Version(parsing: "0.1.0"), size: 8 * 1024) }
        }
        let loaderName = configuration.options[DeviceOptions.loaderName]
        return SMPDevice(
            name: configuration.name, loaderName: loaderName, storage: storage,
            parameters: MCUmgrParameters(bufferSize: bufferSize, bufferCount: bufferCount), swapTime: swapTime,
            confirmFailures: confirmFailures, resetDelay: resetDelay,
            stall: stallAt < 0 ? nil : SMPDevice.Stall(atUploadBytes: stallAt, duration: stallTime),
            answersSlotInfo: configuration.options[DeviceOptions.slotInfo])
    }
}
