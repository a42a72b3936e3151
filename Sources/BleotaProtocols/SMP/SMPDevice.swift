import BleotaCodec
import BleotaLink
import Synchronization

/// What an MCUboot device keeps in flash: two slots and the swap trailer's
/// flags. Survives connections and resets; the upload in progress survives
/// connections only, as in Zephyr, where it lives in RAM.
public final class SMPDeviceStorage: Sendable {
    public struct State: Sendable {
        public var primary: [UInt8]
        public var secondary: [UInt8]?
        /// The image in the primary slot is confirmed (it will not be reverted).
        public var primaryConfirmed = true
        /// A swap to the secondary image is requested: test (once) or permanent.
        public var pendingSwap: PendingSwap?
        /// Boots of the device so far.
        public var boots = 0
        public var slotSize: Int
        public var files: [String: [UInt8]] = [:]

        public enum PendingSwap: Sendable, Equatable { case test, permanent }
    }

    /// An upload in progress (RAM on a real device).
    public struct Upload: Sendable {
        public var length: Int
        public var sha: [UInt8]?
        public var bytes: [UInt8]
    }

    private let state: Mutex<State>
    private let upload = Mutex<Upload?>(nil)
    private let fileUploads = Mutex<[String: [UInt8]]>([:])

    public init(primary: [UInt8], slotSize: Int = 512 * 1024) {
        state = Mutex(State(primary: primary, slotSize: slotSize))
    }

    public func withState<T>(_ body: (inout State) throws -> T) rethrows -> T { try state.withLock { try body(&$0) } }
    public var snapshot: State { state.withLock { $0 } }
    func withUpload<T>(_ body: (inout Upload?) -> T) -> T { upload.withLock { body(&$0) } }
    func withFileUploads<T>(_ body: (inout [String: [UInt8]]) -> T) -> T { fileUploads.withLock { body(&$0) } }

    /// Power-up as MCUboot does it: perform a requested swap if the secondary
    /// image verifies, revert an unconfirmed test image, never boot a bad one.
    /// Returns what happened, for logs and the simulator's trace.
    @discardableResult
    public func boot() -> String {
        upload.withLock { $0 = nil }
        fileUploads.withLock { $0 = [:] }
        return state.withLock { state in
            state.boots += 1
            if let swap = state.pendingSwap {
                state.pendingSwap = nil
                guard let secondary = state.secondary, Self.verifies(secondary) else {
                    state.secondary = nil
                    return "the secondary image does not verify: erased it, kept the primary"
                }
                state.secondary = state.primary
                state.primary = secondary
                state.primaryConfirmed = swap == .permanent
                return swap == .permanent ? "swapped to the new image permanently" : "swapped to the new image for a test boot"
            }
            if !state.primaryConfirmed, let secondary = state.secondary, Self.verifies(secondary) {
                // A test image that was not confirmed: put the old one back.
                state.secondary = state.primary
                state.primary = secondary
                state.primaryConfirmed = true
                return "the test image was not confirmed: reverted to the previous image"
            }
            return "booted the primary image"
        }
    }

    static func verifies(_ image: [UInt8]) -> Bool {
        guard let parsed = try? MCUbootImage(decoding: image) else { return false }
        return (try? parsed.verifyHash()) != nil
    }

    /// The image list MCUmgr reports: primary (active) and secondary when it holds an image.
    public var slots: [SMPImageSlot] {
        let state = snapshot
        var slots: [SMPImageSlot] = []
        if let image = try? MCUbootImage(decoding: state.primary) {
            slots.append(SMPImageSlot(slot: 0, version: image.version.description, hash: image.hashTLV ?? [],
                                      bootable: true, confirmed: state.primaryConfirmed, active: true))
        }
        if let secondary = state.secondary, let image = try? MCUbootImage(decoding: secondary) {
            slots.append(SMPImageSlot(slot: 1, version: image.version.description, hash: image.hashTLV ?? [],
                                      bootable: true, pending: state.pendingSwap != nil,
                                      confirmed: false, active: false, permanent: state.pendingSwap == .permanent))
        }
        return slots
    }
}

/// Timing and reboots, from the simulator or the wall clock.
public struct SMPDeviceEnvironment: Sendable {
    public var clock: any BleotaClock
    public var processingTime: @Sendable (_ bytes: Int) -> Duration
    /// Flash programming time per byte written (erase included).
    public var writeTimePerByte: Duration
    /// How long the swap takes at boot, during which the device is away.
    public var swapTime: Duration
    /// Drops the connection, boots (``SMPDeviceStorage/boot()``) and returns once the link is gone.
    public var reset: @Sendable () async -> Void

    public init(clock: any BleotaClock, processingTime: @escaping @Sendable (Int) -> Duration = { _ in .zero },
                writeTimePerByte: Duration = .zero, swapTime: Duration = .zero, reset: @escaping @Sendable () async -> Void) {
        self.clock = clock
        self.processingTime = processingTime
        self.writeTimePerByte = writeTimePerByte
        self.swapTime = swapTime
        self.reset = reset
    }
}

/// An MCUmgr SMP server in front of MCUboot: the OS, image and file-system
/// groups, answering the way Zephyr's SMP server does — the same sequence,
/// group and command echoed, v1 or v2 errors to match the request, the
/// device's upload offset always authoritative — so standard SMP clients run
/// a whole upgrade against it unchanged.
public actor SMPDevice {
    public nonisolated let storage: SMPDeviceStorage
    public nonisolated let parameters: MCUmgrParameters
    public nonisolated let name: String

    public init(name: String = "bleota-smp", storage: SMPDeviceStorage,
                parameters: MCUmgrParameters = MCUmgrParameters(bufferSize: 2475, bufferCount: 4)) {
        self.name = name
        self.storage = storage
        self.parameters = parameters
    }

    /// Serves one connection until the link drops.
    public func serve(_ link: any Link, environment: SMPDeviceEnvironment) async {
        var reassembler = SMPReassembler(limit: parameters.bufferSize + SMPHeader.size)
        var lastPacket = environment.clock.now
        while true {
            let received: [UInt8]
            do { received = try await link.receive() } catch { return }
            // A message whose rest never came (a fragment was dropped) must not swallow the
            // next one: after a pause, a packet starts a new message, as Zephyr's reassembly does.
            if !reassembler.isEmpty, environment.clock.now - lastPacket > .milliseconds(250) { reassembler.reset() }
            lastPacket = environment.clock.now
            let cost = environment.processingTime(received.count)
            if cost > .zero { try? await environment.clock.sleep(for: cost) }
            for message in reassembler.feed(received) {
                guard let (response, after) = await respond(to: message, environment: environment) else { continue }
                do { try await SMPTransport.send(response, on: link) } catch { return }
                if after == .reset {
                    await environment.reset()
                    return
                }
            }
        }
    }

    public enum Aftermath: Sendable { case none, reset }

    /// Answers one whole message; nil when it cannot be answered (no valid header).
    public func respond(to message: [UInt8], environment: SMPDeviceEnvironment) async -> (SMPPacket, Aftermath)? {
        var reader = ByteReader(message)
        guard let header = try? SMPHeader(decoding: &reader), !header.operation.isResponse else { return nil }
        func reply(_ body: CBOR) -> SMPPacket {
            SMPPacket(header: SMPHeader(operation: header.operation.response, version: header.version, length: 0,
                                        group: header.group, sequence: header.sequence, command: header.command), body: body)
        }
        func failure(_ error: SMPDeviceError) -> SMPPacket {
            // A v1 client knows only the general codes; v2 gets the group's own.
            if header.version == .v1, let group = error.group {
                return reply(.textMap(["rc": CBOR(Self.generalCode(group: group, rc: error.rc))]))
            }
            return reply(error.body)
        }
        let body: CBOR
        do {
            body = try SMPPacket(decoding: message).body
        } catch {
            return (failure(SMPDeviceError(group: nil, rc: 3)), .none) // EINVAL
        }
        let isWrite = header.operation == .write
        do {
            switch (header.group, header.command, isWrite) {
            case (SMPGroup.os, SMPCommandID.echo, true):
                guard let text = body["d"]?.string else { throw SMPDeviceError(group: nil, rc: 3) }
                return (reply(.textMap(["r": .text(text)])), .none)
            case (SMPGroup.os, SMPCommandID.reset, true):
                return (reply(.map([])), .reset)
            case (SMPGroup.os, SMPCommandID.parameters, false):
                return (reply(parameters.body), .none)
            case (SMPGroup.os, SMPCommandID.bootloaderInfo, false):
                if let query = body["query"]?.string {
                    guard query == "mode" else { throw SMPDeviceError(group: SMPGroup.os, rc: 3) } // query yields no answer
                    return (reply(.textMap(["mode": CBOR(1), "no-downgrade": .bool(false)])), .none)
                }
                return (reply(.textMap(["bootloader": .text("MCUboot")])), .none)
            case (SMPGroup.image, SMPCommandID.imageState, false):
                return (reply(SMPImageSlot.listBody(storage.slots)), .none)
            case (SMPGroup.image, SMPCommandID.imageState, true):
                try setState(body)
                return (reply(SMPImageSlot.listBody(storage.slots)), .none)
            case (SMPGroup.image, SMPCommandID.imageUpload, true):
                return (reply(try await upload(body, environment: environment)), .none)
            case (SMPGroup.image, SMPCommandID.imageErase, true):
                try erase(body)
                return (reply(.map([])), .none)
            case (SMPGroup.fileSystem, SMPCommandID.file, true):
                return (reply(try fileUpload(body)), .none)
            case (SMPGroup.fileSystem, SMPCommandID.file, false):
                return (reply(try fileDownload(body)), .none)
            case (SMPGroup.fileSystem, 2, false):
                return (reply(try fileHash(body)), .none)
            default:
                throw SMPDeviceError(group: nil, rc: 8) // ENOTSUP
            }
        } catch let error as SMPDeviceError {
            return (failure(error), .none)
        } catch {
            return (failure(SMPDeviceError(group: nil, rc: 3)), .none)
        }
    }

    /// The general MCUmgr code a v1 client gets for a group error.
    static func generalCode(group: UInt16, rc: Int) -> Int {
        switch (group, rc) {
        case (SMPGroup.image, 3), (SMPGroup.image, 8), (SMPGroup.fileSystem, 3): 5 // ENOENT
        case (SMPGroup.image, 9), (SMPGroup.image, 15), (SMPGroup.image, 30): 2 // ENOMEM
        case (SMPGroup.image, 28), (SMPGroup.image, 32), (SMPGroup.image, 33): 6 // EBADSTATE
        default: 3 // EINVAL
        }
    }

    private func setState(_ body: CBOR) throws(SMPDeviceError) {
        let confirm = body["confirm"]?.boolean ?? false
        let hash = body["hash"]?.byteString
        let slots = storage.slots
        if let hash, let target = slots.first(where: { $0.hash == hash }) {
            if target.active {
                guard confirm else { throw SMPDeviceError(group: SMPGroup.image, rc: 33) } // test the active image: denied
                storage.withState { $0.primaryConfirmed = true }
                return
            }
            guard let secondary = storage.snapshot.secondary, SMPDeviceStorage.verifies(secondary) else {
                throw SMPDeviceError(group: SMPGroup.image, rc: 24) // invalid hash: the image does not verify
            }
            storage.withState { $0.pendingSwap = confirm ? .permanent : .test }
        } else if hash == nil, confirm {
            storage.withState { $0.primaryConfirmed = true }
        } else {
            throw SMPDeviceError(group: SMPGroup.image, rc: 8) // hash not found
        }
    }

    private func erase(_ body: CBOR) throws(SMPDeviceError) {
        let slot = body["slot"]?.int ?? 1
        guard slot == 1 else { throw SMPDeviceError(group: SMPGroup.image, rc: 14) } // invalid slot
        guard storage.snapshot.pendingSwap == nil else { throw SMPDeviceError(group: SMPGroup.image, rc: 28) }
        storage.withState { $0.secondary = nil }
        storage.withUpload { $0 = nil }
    }

    private func upload(_ body: CBOR, environment: SMPDeviceEnvironment) async throws(SMPDeviceError) -> CBOR {
        let request: SMPUploadRequest
        do { request = try SMPUploadRequest(body: body) } catch { throw SMPDeviceError(group: nil, rc: 3) }
        guard request.image == 0 else { throw SMPDeviceError(group: SMPGroup.image, rc: 14) }
        let slotSize = storage.snapshot.slotSize
        if request.offset == 0 {
            guard let length = request.length, length > 0 else { throw SMPDeviceError(group: SMPGroup.image, rc: 21) }
            guard length <= slotSize else { throw SMPDeviceError(group: SMPGroup.image, rc: 30) }
            guard storage.snapshot.pendingSwap == nil else { throw SMPDeviceError(group: SMPGroup.image, rc: 28) }
            // The same image again (by its SHA) resumes where the last upload stopped.
            let resumed = storage.withUpload { upload -> Int? in
                guard let current = upload, let sha = request.sha, current.sha == sha, current.length == length else { return nil }
                return current.bytes.count
            }
            if let resumed, resumed > 0 { return .textMap(["off": CBOR(resumed)]) }
            if request.data.count >= 4, !MCUbootImage.startsWithMagic(request.data) {
                throw SMPDeviceError(group: SMPGroup.image, rc: 23) // invalid image header magic
            }
            storage.withState { $0.secondary = nil }
            storage.withUpload { $0 = SMPDeviceStorage.Upload(length: length, sha: request.sha, bytes: []) }
        }
        let outcome = storage.withUpload { upload -> Result<(offset: Int, done: Bool, match: Bool?), SMPDeviceError> in
            guard var current = upload else { return .failure(SMPDeviceError(group: SMPGroup.image, rc: 17)) } // no context
            // Not where the device is: tell the client where it is instead.
            guard request.offset == current.bytes.count else { return .success((current.bytes.count, false, nil)) }
            guard current.bytes.count + request.data.count <= current.length else {
                return .failure(SMPDeviceError(group: SMPGroup.image, rc: 31)) // data overrun
            }
            current.bytes += request.data
            upload = current
            let done = current.bytes.count == current.length
            let match = done ? current.sha.map { $0 == SHA256Digest.hash(current.bytes) } : nil
            return .success((current.bytes.count, done, match))
        }
        let progress: (offset: Int, done: Bool, match: Bool?)
        switch outcome {
        case .success(let value): progress = value
        case .failure(let error): throw error
        }
        if environment.writeTimePerByte > .zero, !request.data.isEmpty {
            try? await environment.clock.sleep(for: environment.writeTimePerByte * request.data.count)
        }
        if progress.done {
            let bytes = storage.withUpload { $0?.bytes } ?? []
            if progress.match != false {
                storage.withState { $0.secondary = bytes }
            } else {
                storage.withUpload { $0 = nil } // a damaged upload is not resumable: start again
            }
            var pairs: [(key: CBOR, value: CBOR)] = [(.text("off"), CBOR(progress.offset))]
            if let match = progress.match { pairs.append((.text("match"), .bool(match))) }
            return .map(pairs)
        }
        return .textMap(["off": CBOR(progress.offset)])
    }

    private func fileUpload(_ body: CBOR) throws(SMPDeviceError) -> CBOR {
        let request: SMPFileUploadRequest
        do { request = try SMPFileUploadRequest(body: body) } catch { throw SMPDeviceError(group: nil, rc: 3) }
        guard !request.name.isEmpty, request.name.utf8.count <= 255 else { throw SMPDeviceError(group: SMPGroup.fileSystem, rc: 2) }
        let result = storage.withFileUploads { uploads -> Result<(Int, [UInt8]?), SMPDeviceError> in
            if request.offset == 0 {
                uploads[request.name] = []
            }
            guard var bytes = uploads[request.name] else { return .failure(SMPDeviceError(group: SMPGroup.fileSystem, rc: 11)) }
            guard request.offset == bytes.count else { return .success((bytes.count, nil)) }
            bytes += request.data
            uploads[request.name] = bytes
            return .success((bytes.count, bytes))
        }
        switch result {
        case .failure(let error): throw error
        case .success(let (offset, bytes)):
            // Zephyr writes through to the file as it goes: the file holds what arrived.
            if let bytes { storage.withState { $0.files[request.name] = bytes } }
            return .textMap(["off": CBOR(offset)])
        }
    }

    /// File group command 2: a file's SHA-256 (or CRC-32) over `off`…`off+len`.
    private func fileHash(_ body: CBOR) throws(SMPDeviceError) -> CBOR {
        guard let name = body["name"]?.string else { throw SMPDeviceError(group: nil, rc: 3) }
        guard let file = storage.snapshot.files[name] else { throw SMPDeviceError(group: SMPGroup.fileSystem, rc: 3) }
        let type = body["type"]?.string ?? "crc32"
        let offset = body["off"]?.int ?? 0
        guard (0...file.count).contains(offset) else { throw SMPDeviceError(group: SMPGroup.fileSystem, rc: 12) }
        let requested = body["len"]?.int ?? file.count - offset
        guard requested >= 0 else { throw SMPDeviceError(group: nil, rc: 3) } // EINVAL, as Zephyr's unsigned len
        let length = min(requested, file.count - offset)
        let slice = file[offset..<offset + length]
        switch type {
        case "sha256":
            return .textMap(["type": .text(type), "off": CBOR(offset), "len": CBOR(length), "output": .bytes(SHA256Digest.hash(slice))])
        case "crc32":
            return .textMap(["type": .text(type), "off": CBOR(offset), "len": CBOR(length), "output": CBOR(Int(CRC32.checksum(slice)))])
        default:
            throw SMPDeviceError(group: SMPGroup.fileSystem, rc: 13) // checksum/hash type not found
        }
    }

    private func fileDownload(_ body: CBOR) throws(SMPDeviceError) -> CBOR {
        guard let name = body["name"]?.string, let offset = body["off"]?.int, offset >= 0 else {
            throw SMPDeviceError(group: nil, rc: 3)
        }
        guard let file = storage.snapshot.files[name] else { throw SMPDeviceError(group: SMPGroup.fileSystem, rc: 3) }
        guard offset <= file.count else { throw SMPDeviceError(group: SMPGroup.fileSystem, rc: 12) }
        // Leave room for the header and the map's keys within the buffer.
        let chunk = min(file.count - offset, parameters.bufferSize - 48)
        var pairs: [(key: CBOR, value: CBOR)] = [(.text("off"), CBOR(offset)), (.text("data"), .bytes(Array(file[offset..<offset + chunk])))]
        if offset == 0 { pairs.append((.text("len"), CBOR(file.count))) }
        return .map(pairs)
    }
}
