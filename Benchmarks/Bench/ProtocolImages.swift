import BleotaCodec
import BleotaEngine
import BleotaLink
import BleotaProtocols
import BleotaSimulator
import Foundation
import Logging

// Images in the vendor protocols' own containers, and one simulated update with a
// protocol's own host and device halves through the plug-in API: the benchmark's
// figures for Espressif's BLE OTA, SUOTA, TI OAD, Silicon Labs' OTA DFU and the two
// described protocols (protocols/stm32wb-ota.yaml, protocols/telink-ota.yaml).
//
// The containers are laid out as scripts/make-vendor-samples.py lays them out, and
// each is checked here by the parser its protocol's `prepareImage` and device half
// use, so a layout that drifts from the parser fails at once with the parser's words.

/// Why a benchmark image or protocol cannot be had: one line.
struct BenchmarkSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// An image of about `bodyBytes` bytes of pseudo-random content wrapped in the container `protocolName`'s device half checks, for the benchmark.
func benchmarkImage(for protocolName: String, bodyBytes: Int, seed: UInt64) throws -> [UInt8] {
    let body = pseudoRandom(max(1, bodyBytes), seed: seed)
    let image: [UInt8]
    let problem: String?
    switch protocolName {
    case EspressifOTAProtocol.name:
        image = espressifApplicationImage(body)
        problem = ESPAppImage.problem(image)
    case SUOTAProtocol.name:
        image = da1469xImage(body)
        problem = SUOTAImageHeader.problem(image)
    case TIOADProtocol.name:
        image = tiOADImage(body)
        problem = TIOADImageHeader.problem(image)
    case SiliconLabsOTAProtocol.name:
        image = geckoBootloaderImage(body)
        problem = GeckoBootloaderImage.problem(image)
    case "stm32wb-ota":
        image = stm32wbImage(body)
        // protocols/stm32wb-ota.yaml's image.checks.
        let checks: [ProtocolDescription.ImageCheck] = [.magicPointer(at: 0x140, base: 0x0800_7000, magic: 0x9444_8A29)]
        problem = firstProblem(checks, image)
    case "telink-ota":
        image = telinkImage(body)
        // protocols/telink-ota.yaml's image.checks.
        let checks: [ProtocolDescription.ImageCheck] = [.marker(at: 8, bytes: Array("KNLT".utf8)), .sizeAt(0x18), .crc32Suffix(finalXor: false)]
        problem = firstProblem(checks, image)
    default:
        throw BenchmarkSetupError(
            "no benchmark image for protocol '\(protocolName)': use espressif-ota, suota, ti-oad, silabs-ota, stm32wb-ota or telink-ota")
    }
    if let problem {
        throw BenchmarkSetupError("the \(protocolName) benchmark image (\(image.count) bytes) would be refused: \(problem)")
    }
    return image
}

/// `protocolName`'s protocol: a built-in one, or the description `protocols/NAME.yaml` read as
/// `--protocol-file` reads it (`DescribedProtocol(contentsOf:)`); with the registry an address naming
/// it (`protocol=NAME`) parses against, the built-in one with the description registered.
func benchmarkProtocol(named protocolName: String) throws -> (updateProtocol: any UpdateProtocol, registry: ProtocolRegistry) {
    if let builtIn = ProtocolRegistry.builtIn.named(protocolName) { return (builtIn, ProtocolRegistry.builtIn) }
    // From the repository's root (`swift run bleota-bench`), else beside these sources.
    let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let candidates = ["protocols/\(protocolName).yaml", repository.appendingPathComponent("protocols/\(protocolName).yaml").path]
    guard let path = candidates.first(where: { FileManager.default.fileExists(atPath: $0) }) else {
        throw BenchmarkSetupError(
            "'\(protocolName)' is no built-in protocol (\(ProtocolRegistry.builtIn.names.joined(separator: ", "))) and protocols/\(protocolName).yaml does not exist")
    }
    let described = try DescribedProtocol(contentsOf: path)
    guard described.name == protocolName else {
        throw BenchmarkSetupError("\(path) describes '\(described.name)', not '\(protocolName)'")
    }
    return (described, ProtocolRegistry.builtIn.registering(described))
}

/// One simulated update with `protocolName`'s own host and device halves, through the plug-in API; goodput over the transfer, or the failure's message.
func simulatedProtocolFlash(
    _ address: String, protocolName: String, image: [UInt8], trace: Bool = false
) async throws -> (
    goodput: Double, capacity: Double, note: String?
) {
    let (chosen, registry) = try benchmarkProtocol(named: protocolName)
    guard chosen.identity.transports.contains(.simulator) else {
        throw BenchmarkSetupError("\(chosen.identity.displayName) does not run on the simulator")
    }
    var parsed = try SimulatorAddress(parsing: address, registry: registry)
    // The device's slot holds the image unless the address sets its size (slot=…) on purpose.
    let query = address.split(separator: "?", maxSplits: 1).dropFirst().first ?? ""
    if !query.split(separator: "&").contains(where: { $0.hasPrefix("slot=") }) {
        parsed.slotSize = max(parsed.slotSize, (image.count + 4095) / 4096 * 4096)
    }
    let capacity = parsed.model.linkCapacity

    // `prepareImage` reads a file, as `bleota flash IMAGE` has it do.
    let fileExtension = protocolName == SUOTAProtocol.name ? "img" : protocolName == SiliconLabsOTAProtocol.name ? "gbl" : "bin"
    let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("bleota-bench-\(protocolName)-\(UUID().uuidString).\(fileExtension)").path
    guard FileManager.default.createFile(atPath: path, contents: Data(image)) else {
        throw BenchmarkSetupError("cannot write the benchmark image to \(path)")
    }
    defer { try? FileManager.default.removeItem(atPath: path) }
    let prepared: PreparedImage
    do throws(TransferError) {
        prepared = try chosen.prepareImage(ImageRequest(path: path))
    } catch {
        return (0, capacity, "the image was refused: \(error.message)")
    }
    let mode = chosen.flashModes.first ?? .testAndConfirm

    let printPackets: @Sendable ([String]) -> Void = { lines in
        for line in lines { print(line) }
    }
    let outcome: Simulation.Outcome<Result<UpdateReport, TransferError>> = try await Simulation.run(
        parsed, protocol: chosen, description: address, packetTrace: trace && arguments.contains("--trace-packets") ? printPackets : nil
    ) { connector, clock in
        let host = chosen.makeHost(
            HostContext(
                protocolName: chosen.name, connector: connector, clock: clock, logger: benchLogger(trace: trace),
                onEvent: tracePrinter(clock, enabled: trace)))
        do throws(TransferError) {
            return .success(try await host.flash(prepared, mode: mode))
        } catch {
            return .failure(error)
        }
    }
    switch outcome.value {
    case .success(let report): return (report.goodput, outcome.linkCapacity, nil)
    case .failure(let error): return (0, outcome.linkCapacity, error.message)
    }
}

/// `--trace-protocol`: a line per progress report and note, on the simulated clock from now
/// (nothing when not `enabled`).
func tracePrinter(_ clock: any BleotaClock, enabled: Bool) -> @Sendable (UpdateEvent) -> Void {
    let start = clock.now
    return { event in
        guard enabled else { return }
        let at = (clock.now - start).seconds
        switch event {
        case .progress(let progress):
            print(
                String(
                    format: "%8.3f s %8d B window %3d gap %6.2f ms sent %5d lost %4d", at, progress.bytesAcknowledged, progress.window,
                    progress.interPacketDelay.seconds * 1000, progress.packetsSent, progress.packetsLost))
        case .note(let note): print(String(format: "%8.3f s note: %@", at, note))
        default: break
        }
    }
}

/// The host's log: debug when tracing, info otherwise.
func benchLogger(trace: Bool) -> Logger {
    var logger = Logger(label: "bleota.bench")
    logger.logLevel = trace ? .debug : .info
    return logger
}

// MARK: - Containers

/// `value` as four bytes, little-endian.
private func littleEndian32(_ value: UInt32) -> [UInt8] {
    (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * UInt32($0))) }
}

private func put32(_ value: UInt32, into bytes: inout [UInt8], at offset: Int) {
    bytes.replaceSubrange(offset..<offset + 4, with: littleEndian32(value))
}

private func firstProblem(_ checks: [ProtocolDescription.ImageCheck], _ image: [UInt8]) -> String? {
    for check in checks {
        if let problem = check.problem(image) { return problem }
    }
    return nil
}

/// ESP-IDF application image (esp_app_format.h): the 24-byte header (magic 0xE9, one segment,
/// hash_appended = 1), one segment (load address, length, data padded to 4 bytes), zeros up to
/// the checksum byte (0xEF XOR every data byte) ending a 16-byte boundary, then the SHA-256 of
/// everything before it. The segment is flash-mapped code at 0x400D0020: with the app partition
/// at 0x10000 its data sits at flash 0x10020, congruent to its address modulo 64 KiB, as
/// esptool lays mapped segments out.
private func espressifApplicationImage(_ body: [UInt8]) -> [UInt8] {
    var data = body
    while data.count % 4 != 0 { data.append(0) }
    let loadAddress: UInt32 = 0x400D_0020
    var image = [UInt8](repeating: 0, count: ESPAppImage.headerSize)
    image[0] = ESPAppImage.magic
    image[1] = 1  // segment count
    image[2] = 2  // SPI mode: DIO
    image[3] = 0x20  // flash 4 MB (high nibble), 40 MHz (low nibble)
    put32(loadAddress, into: &image, at: 4)  // entry point
    image[8] = 0xEE  // WP pin: unused
    // 12…13 chip ID 0 (ESP32), 14…22 revisions and reserved bytes left 0.
    image[23] = 1  // hash_appended
    image += littleEndian32(loadAddress) + littleEndian32(UInt32(data.count)) + data
    while (image.count + 1) % 16 != 0 { image.append(0) }
    image.append(data.reduce(UInt8(0xEF), ^))
    return image + SHA256Digest.hash(image)
}

/// DA1469x SUOTA image (SDK10 suota.h, as mkimage writes it): "Qq", the code's size, its CRC-32,
/// the version "2.0.0" in 16 bytes, timestamp 2, pointer_to_ivt 0x400; 0xFF up to 0x400, then
/// the code. Version and timestamp differ from the simulated device's factory image ("1.0.0"
/// or the address's version=, timestamp 1), which it would refuse as SAME_IMG_ERR.
private func da1469xImage(_ code: [UInt8]) -> [UInt8] {
    let codeOffset = 0x400
    let version = Array("2.0.0".utf8)
    var image = SUOTAImageHeader.signature
    image += littleEndian32(UInt32(code.count)) + littleEndian32(CRC32.checksum(code))
    image += version + [UInt8](repeating: 0, count: 16 - version.count)
    image += littleEndian32(2) + littleEndian32(UInt32(codeOffset))
    image += [UInt8](repeating: 0xFF, count: codeOffset - image.count)
    return image + code
}

/// TI OAD image for CC26x2 (oad_image_header.h, as oad_image_tool lays it out): the 44-byte
/// header ("CC26x2R1", CRC-32 at 8 over offset 12 to the end, BIM 3, metadata 1, tech type BLE,
/// copy and CRC status unchecked, image type 1 = application, length at 24, software version
/// "0002" at 32, end address at 36, header length 44 at 40), a contiguous-payload segment
/// (type 1, BLE, length, start 0), the code. "0002" differs from the factory image's "0001",
/// which is how the host tells the new image from the old after Enable Image.
private func tiOADImage(_ code: [UInt8]) -> [UInt8] {
    var image = [UInt8](repeating: 0, count: TIOADImageHeader.size)
    image.replaceSubrange(0..<8, with: TIOADImageHeader.cc26x2)
    image[12] = TIOADImageHeader.bimVersion
    image[13] = TIOADImageHeader.metadataVersion
    image[14] = 0xFE
    image[15] = 0xFF  // tech type: BLE
    image[16] = 0xFF  // copy status: not copied
    image[17] = 0xFF  // CRC status: not checked
    image[18] = 1  // image type: application
    image[19] = 0  // image number
    image.replaceSubrange(32..<36, with: Array("0002".utf8))
    image[40] = UInt8(TIOADImageHeader.size)  // header length, u16
    image += [0x01, 0xFE, 0xFF, 0xFF] + littleEndian32(UInt32(12 + code.count)) + littleEndian32(0)
    image += code
    put32(UInt32(image.count), into: &image, at: 24)
    put32(UInt32(image.count - 1), into: &image, at: 36)
    put32(CRC32.checksum(image[12...]), into: &image, at: 8)
    return image
}

/// GBL v3 file (btl_gbl_format.h): header tag (version 0x03000000, plain), application tag (type 1,
/// version 2, capabilities 0, product ID 16 zeros), one program tag at address 0 with the code,
/// end tag whose CRC-32 covers the file from its first byte through the end tag's 8-byte header.
/// Address 0 keeps address + length within the simulated slot, which the AppLoader checks at 0x03;
/// version 2 differs from the factory application's 1, which the host reads back afterwards.
private func geckoBootloaderImage(_ program: [UInt8]) -> [UInt8] {
    func tag(_ tag: GeckoBootloaderImage.Tag, _ value: [UInt8]) -> [UInt8] {
        littleEndian32(tag.rawValue) + littleEndian32(UInt32(value.count)) + value
    }
    var file = tag(.header, littleEndian32(0x0300_0000) + littleEndian32(0))
    file += tag(.application, littleEndian32(1) + littleEndian32(2) + littleEndian32(0) + [UInt8](repeating: 0, count: 16))
    file += tag(.program, littleEndian32(0) + program)
    file += littleEndian32(GeckoBootloaderImage.Tag.end.rawValue) + littleEndian32(4)
    file += littleEndian32(CRC32.checksum(file))
    return file
}

/// STM32WB application for ST's BLE_Ota loader, linked at 0x08007000: the code (0xFF to at least
/// 0x144 bytes and to a multiple of 4), the address of the magic word at 0x140, the magic
/// 0x94448A29 appended. The loader erases 0x40 sectors (256 KiB) from sector 7 before the upload
/// (the YAML's reboot-to-loader message): a real device takes no more.
private func stm32wbImage(_ code: [UInt8]) -> [UInt8] {
    var image = code
    if image.count < 0x144 { image += [UInt8](repeating: 0xFF, count: 0x144 - image.count) }
    while image.count % 4 != 0 { image.append(0xFF) }
    put32(0x0800_7000 + UInt32(image.count), into: &image, at: 0x140)
    return image + littleEndian32(0x9444_8A29)
}

/// Telink firmware (pvvx's tl_check_fw.py rules): 5D 02 at 6, "KNLT" at 8, 0xFF to a multiple of
/// 16 bytes, the size with the CRC at 0x18, then the CRC-32 without its final XOR of everything
/// before it. The last 16-byte PDU is padded with 0xFF; the device cuts the image at its size field.
private func telinkImage(_ code: [UInt8]) -> [UInt8] {
    var image = code
    if image.count < 0x20 { image += [UInt8](repeating: 0xFF, count: 0x20 - image.count) }
    image[6] = 0x5D
    image[7] = 0x02
    image.replaceSubrange(8..<12, with: Array("KNLT".utf8))
    while image.count % 16 != 0 { image.append(0xFF) }
    put32(UInt32(image.count + 4), into: &image, at: 0x18)
    return image + littleEndian32(CRC32.checksum(image) ^ 0xFFFF_FFFF)
}
