import BleotaCodec
import BleotaEngine
import BleotaLink

/// An MCUmgr SMP server in front of MCUboot — the device half of ``SMPProtocol`` —
/// answering as Zephyr's `os_mgmt`, `img_mgmt` and `fs_mgmt` do (read from
/// Zephyr's sources; see protocols/smp.md, "What the simulated device does"):
/// the same sequence, group and command echoed; v1 requests get general codes
/// (`rc`), v2 requests the group's own (`err {group, rc}`); the device's upload
/// offset always wins; an upload is refused while the secondary slot is in
/// use (a swap pending, or a test image running unconfirmed); marking an
/// image does not validate it — MCUboot does that at boot, and erases an
/// image that fails. Standard SMP clients run a whole upgrade against it
/// unchanged.
package actor SMPDevice: DeviceHalf {
    package nonisolated let storage: SMPDeviceStorage
    package nonisolated let parameters: MCUmgrParameters
    package nonisolated let name: String
    /// How long an MCUboot swap (or revert) keeps the device away after a reset.
    package nonisolated let swapTime: Duration

    /// How many more confirms of a test boot fail to write the trailer: a fault
    /// kept across resets, as a worn flash sector is (`confirm-fails`).
    private var confirmFailuresLeft: Int

    /// Zephyr's BLE reassembly buffer: one for the transport, no timeout; see ``collect(_:)``.
    private var partial: (bytes: [UInt8], remaining: Int)?
    /// `fs_mgmt`'s one transfer context: the file being uploaded and the offset it expects next.
    private var fileUpload: (name: String, expected: Int, length: Int?)?

    package init(
        name: String = "bleota-smp", loaderName: String? = nil, storage: SMPDeviceStorage,
        parameters: MCUmgrParameters = MCUmgrParameters(bufferSize: 2475, bufferCount: 4), swapTime: Duration = .seconds(2),
        confirmFailures: Int = 0, resetDelay: Duration = .zero, stall: Stall? = nil, answersSlotInfo: Bool = true
    ) {
        self.answersSlotInfo = answersSlotInfo
        self.name = name
        self.loaderName = loaderName
        self.storage = storage
        self.parameters = parameters
        self.swapTime = swapTime
        self.confirmFailuresLeft = confirmFailures
        self.resetDelay = resetDelay
        self.stall = stall
    }

    /// How long after answering a reset the device resets: Zephyr's `os_mgmt` answers, then resets
    /// from a delayed work item `CONFIG_MCUMGR_GRP_OS_RESET_MS` later (250 ms by default), and the
    /// old image answers every request until then, its slots unchanged.
    package nonisolated let resetDelay: Duration

    /// A device whose request processing stops once for a while mid-upload (a busy CPU, a
    /// debugger, a stopped process), as seen of Zephyr's `smp_svr`: what arrives meanwhile fills
    /// its buffers and the rest is dropped ("Failed to allocate mcumgr buffer"); once it goes on,
    /// the requests it kept find no buffer for their answers and are answered `MGMT_ERR_ENOMEM`
    /// (rc 2), their data not written.
    package struct Stall: Sendable, Hashable {
        /// Upload bytes the device holds when it stops.
        package var atUploadBytes: Int
        package var duration: Duration
        package init(atUploadBytes: Int, duration: Duration) {
            self.atUploadBytes = atUploadBytes
            self.duration = duration
        }
    }
    package nonisolated let stall: Stall?
    /// Whether it answers slot info (Zephyr's `CONFIG_MCUMGR_GRP_IMG_SLOT_INFO`); without, "not supported".
    package nonisolated let answersSlotInfo: Bool
    /// Whether the stall has happened (once per device).
    private var stalled = false

    /// The loader of a firmware-loader device is its bootloader: it advertises as one (the next address).
    package var mode: DeviceMode { storage.snapshot.inLoader ? .bootloader : .application }

    /// The name the firmware loader advertises, when it has one of its own (an NCS loader's `FL_…`).
    package nonisolated let loaderName: String?
    package var advertisedName: String? { storage.snapshot.inLoader ? loaderName : nil }

    package var firmware: FirmwareState {
        let state = storage.snapshot
        return FirmwareState(running: state.primary, confirmed: state.primaryConfirmed, pending: state.pendingSwap == nil ? nil : state.secondary)
    }

    /// What image 0 runs, and on a two-core part what the network core runs (which no SMP request shows).
    package var runningVersion: String {
        let state = storage.snapshot
        let application = (try? MCUbootImage(decoding: state.primary))?.version.description ?? "none"
        guard let core = state.networkCore else { return application }
        return "\(application) (network core \((try? MCUbootImage(decoding: core.running))?.version.description ?? "none"))"
    }

    /// Power-up: MCUboot's boot decisions, and RAM lost.
    package func powerCycle() {
        storage.boot()
        partial = nil
        fileUpload = nil
    }

    /// Serves one connection until the link drops or the device resets.
    ///
    /// A new connection starts with an empty reassembly buffer: bleota's BLE
    /// connector unsubscribes and subscribes again on connecting, which is
    /// what clears Zephyr's (a disconnect alone does not).
    package func serve(_ link: any Link, environment: DeviceEnvironment) async {
        partial = nil
        let clock = environment.clock
        /// When an answered reset takes effect (``resetDelay`` after its answer).
        var resetAt: Duration?
        while true {
            let received: [UInt8]
            do {
                if let resetAt {
                    received = try await withDeadline(max(.zero, resetAt - clock.now), clock: clock) { try await link.receive() }
                } else {
                    received = try await link.receive()
                }
            } catch is DeadlineExceeded {
                break
            } catch {
                // The host went away; a reset already answered still comes.
                guard let resetAt else { return }
                try? await clock.sleep(until: resetAt)
                break
            }
            let cost = environment.processingTime(received.count)
            if cost > .zero { try? await clock.sleep(for: cost) }
            guard let message = request(in: received, on: link) else { continue }
            guard let (response, after) = await respond(to: message, environment: environment) else { continue }
            do { try await SMPTransport.send(response, on: link) } catch { return }
            if after == .reset, resetAt == nil {
                guard resetDelay > .zero else { break }
                resetAt = clock.now + resetDelay
            }
            if let stall, !stalled, storage.uploadedBytes >= stall.atUploadBytes {
                stalled = true
                guard await stallThenRefuse(link, for: stall.duration, environment: environment) else { return }
            }
        }
        await environment.reboot(RebootRequest(extraDowntime: storage.snapshot.swapType == .none ? .zero : swapTime))
    }

    /// ``Stall``: keeps what fits its buffers while stopped, then answers each kept request
    /// "out of memory". False once the link is gone.
    private func stallThenRefuse(_ link: any Link, for duration: Duration, environment: DeviceEnvironment) async -> Bool {
        let clock = environment.clock
        let end = clock.now + duration
        var kept: [[UInt8]] = []
        while clock.now < end {
            do {
                let received = try await withDeadline(end - clock.now, clock: clock) { try await link.receive() }
                // Beyond its buffers a request is dropped as it arrives.
                if let message = request(in: received, on: link), kept.count < parameters.bufferCount { kept.append(message) }
            } catch is DeadlineExceeded {
                break
            } catch {
                return false
            }
        }
        for message in kept {
            guard let refusal = Self.outOfMemory(answering: message) else { continue }
            do { try await SMPTransport.send(refusal, on: link) } catch { return false }
        }
        return true
    }

    /// The answer Zephyr's SMP layer gives a request for which it has no buffer: `{"rc": 2}`
    /// whatever the version (the error comes from the transport, not a group).
    static func outOfMemory(answering message: [UInt8]) -> SMPPacket? {
        guard message.count >= SMPHeader.size else { return nil }
        let operation: SMPHeader.Operation = SMPHeader.Operation(rawValue: message[0] & 0x07) == .read ? .read : .write
        let version: SMPHeader.Version = (message[0] >> 3) & 0x03 == 0 ? .v1 : .v2
        let group = SMPGroup(rawValue: UInt16(message[4]) << 8 | UInt16(message[5]))
        return SMPPacket(
            header: SMPHeader(operation: operation.response, version: version, length: 0, group: group, sequence: message[6], command: message[7]),
            body: .textMap(["rc": CBOR(SMPReturnCode.noMemory.rawValue)]))
    }

    /// The request a received packet completes, if any. Over UDP and serial a packet is a whole
    /// request, never joined with the next (Zephyr's UDP transport hands each datagram to SMP as it
    /// is, so one cut short by the transport's read is answered "corrupt"); one longer than the
    /// buffer is dropped. Over BLE, writes are joined (``collect(_:)``).
    func request(in received: [UInt8], on link: any Link) -> [UInt8]? {
        guard link.parameters.carriesWholeMessages else { return collect(received) }
        return received.count <= parameters.bufferSize ? received : nil
    }

    /// Zephyr's SMP reassembly over BLE (`smp_reassembly.c`): a write starts a
    /// request when none is partly received — it must hold the 8-byte header,
    /// and the request must fit the buffer — and is otherwise appended blindly,
    /// with no timeout. A write longer than what the partial request still
    /// needs overflows: both are dropped.
    func collect(_ fragment: [UInt8]) -> [UInt8]? {
        if var current = partial {
            guard fragment.count <= current.remaining else {
                partial = nil  // -EOVERFLOW: the partial request and this write are both lost
                return nil
            }
            current.bytes += fragment
            current.remaining -= fragment.count
            guard current.remaining == 0 else {
                partial = current
                return nil
            }
            partial = nil
            return current.bytes
        }
        guard fragment.count >= SMPHeader.size, let total = SMPPacket.totalLength(of: fragment) else { return nil }  // -ENODATA
        guard fragment.count <= parameters.bufferSize, total <= parameters.bufferSize else { return nil }  // -ENOSR: buf_size counts the header
        guard fragment.count <= total else { return nil }  // -EOVERFLOW
        guard fragment.count < total else { return fragment }
        partial = (fragment, total - fragment.count)
        return nil
    }

    package enum Aftermath: Sendable { case none, reset }

    /// Answers one whole message; nil when it cannot be answered (fewer than 8 bytes: no header to answer).
    package func respond(to message: [UInt8], environment: DeviceEnvironment) async -> (SMPPacket, Aftermath)? {
        guard message.count >= SMPHeader.size else { return nil }
        // Zephyr serves reads and writes; anything else (a response, or op 4…7) gets ENOTSUP,
        // answered as to a write, since its response op is READ_RSP for a read and WRITE_RSP
        // otherwise (smp_rsp_op; a build without CONFIG_SMP_CLIENT, the usual one).
        let requested = SMPHeader.Operation(rawValue: message[0] & 0x07)
        let isRequest = requested == .read || requested == .write
        let operation: SMPHeader.Operation = requested == .read ? .read : .write
        let versionBits = (message[0] >> 3) & 0x03
        let version: SMPHeader.Version = versionBits == 0 ? .v1 : .v2
        let group = SMPGroup(rawValue: UInt16(message[4]) << 8 | UInt16(message[5]))
        let header = SMPHeader(operation: operation, version: version, length: 0, group: group, sequence: message[6], command: message[7])
        func reply(_ body: CBOR) -> SMPPacket {
            SMPPacket(
                header: SMPHeader(
                    operation: operation.response, version: version, length: 0, group: group,
                    sequence: header.sequence, command: header.command), body: body)
        }
        func failure(_ error: SMPDeviceError) -> SMPPacket {
            // A v1 client knows only the general codes: Zephyr translates and drops the rest.
            if version == .v1, error.group != nil { return reply(.textMap(["rc": CBOR(error.code.general.rawValue)])) }
            return reply(error.body)
        }
        guard isRequest else { return (failure(SMPDeviceError(.general(.notSupported))), .none) }
        if versionBits > 1 { return (failure(SMPDeviceError(.general(.versionTooNew))), .none) }
        let length = Int(UInt16(message[2]) << 8 | UInt16(message[3]))
        guard length <= message.count - SMPHeader.size else { return (failure(SMPDeviceError(.general(.corrupt))), .none) }
        // Reset does not look at its body (Zephyr without a reset hook): empty, garbage or
        // anything resets. Every other command needs a CBOR map.
        if header.smpCommand == .reset, operation == .write {
            // A boot mode is kept for the next boot where the device has a firmware loader to boot.
            if storage.snapshot.firmwareLoader != nil, length > 0,
                let body = try? CBOR(decoding: Array(message[SMPHeader.size..<SMPHeader.size + length])),
                let request = try? SMPResetRequest(body: body), let mode = request.bootMode
            {
                storage.withState { $0.bootModeRequest = mode }
            }
            return (reply(.map([])), .reset)
        }
        let body: CBOR
        do {
            body = try CBOR(decoding: Array(message[SMPHeader.size..<SMPHeader.size + length]))
            guard case .map = body else { throw SMPDeviceError(.general(.invalidArgument)) }
        } catch {
            return (failure(SMPDeviceError(.general(.invalidArgument))), .none)
        }
        let isWrite = operation == .write
        do {
            switch (header.smpCommand, isWrite) {
            case (.echo, _):
                // Zephyr serves echo for read and write alike; a missing `d` echoes nothing.
                guard body["d"] == nil || body["d"]?.string != nil else { throw SMPDeviceError(.general(.invalidArgument)) }
                return (reply(SMPEchoResponse(text: body["d"]?.string ?? "").body), .none)
            case (.parameters, false):
                return (reply(parameters.body), .none)
            case (.applicationInfo, false):
                return (reply(try applicationInfo(body)), .none)
            case (.bootloaderInfo, false):
                if let query = body["query"] {
                    // Any query but "mode" yields no answer; Zephyr returns it as a plain code.
                    guard query.string == "mode" else { throw SMPDeviceError(.general(.invalidArgument)) }
                    // Swap using scratch (1), or direct-XIP (4, with revert 5), as `os_mgmt` reports its Kconfig.
                    let state = storage.snapshot
                    return (reply(SMPBootloaderInfo(mode: state.mode.rawValue, noDowngrade: state.directXIP != nil).body), .none)
                }
                return (reply(SMPBootloaderInfo(bootloader: "MCUboot").body), .none)
            case (.imageState, false):
                return (reply(SMPImageSlot.listBody(storage.slots, numbered: storage.imageCount > 1)), .none)
            case (.imageState, true):
                try setState(body)
                return (reply(SMPImageSlot.listBody(storage.slots, numbered: storage.imageCount > 1)), .none)
            case (.imageUpload, true):
                return (reply(try await upload(body, environment: environment)), .none)
            case (.slotInfo, false):
                guard answersSlotInfo else { throw SMPDeviceError(.general(.notSupported)) }
                // Each image's two slots; an upload goes to its slot 1 (`upload_image_id`).
                let state = storage.snapshot
                // With a firmware loader, only the loader takes an upload, and into slot 0.
                let free = state.firmwareLoader != nil ? (state.inLoader ? 0 : -1) : state.mode.hasSecondSlot ? 1 - state.activeSlot : -1
                var images: [SMPSlotInfo.Image] = [
                    .init(
                        image: 0,
                        slots: (state.mode.hasSecondSlot || state.firmwareLoader != nil ? [0, 1] : [0]).map {
                            .init(slot: $0, size: state.slotSize, uploadImageID: $0 == free ? 0 : nil)
                        })
                ]
                if let core = state.networkCore {
                    images.append(.init(image: 1, slots: [.init(slot: 0, size: core.slotSize), .init(slot: 1, size: core.slotSize, uploadImageID: 1)]))
                }
                return (reply(SMPSlotInfo(images: images).body), .none)
            case (.imageErase, true):
                try erase(body)
                return (reply(.map([])), .none)
            case (.file, true):
                return (reply(try fileUpload(body, version: version)), .none)
            case (.file, false):
                return (reply(try fileDownload(body)), .none)
            case (.fileStatus, false):
                return (reply(SMPFileStatus(length: try file(named: body).count).body), .none)
            case (.fileHash, false):
                return (reply(try fileHash(body)), .none)
            case (.fileHashTypes, false):
                return (reply(Self.hashTypes.body), .none)
            case (.fileClose, true):
                fileUpload = nil
                return (reply(.map([])), .none)
            default:
                throw SMPDeviceError(.general(.notSupported))
            }
        } catch let error as SMPDeviceError {
            return (failure(error), .none)
        } catch let error as FileOffsetError {
            // fs_mgmt answers a wrong upload offset with its error and the offset it expects.
            if version == .v1 { return (reply(.textMap(["rc": CBOR(SMPReturnCode.unknown.rawValue)])), .none) }
            return (
                reply(
                    .textMap([
                        "err": .textMap([
                            "group": CBOR(Int(SMPGroup.fileSystem.rawValue)),
                            "rc": CBOR(SMPFileSystemReturnCode.fileOffsetNotValid.rawValue),
                        ]),
                        "len": CBOR(error.expected),
                    ])), .none
            )
        } catch {
            return (failure(SMPDeviceError(.general(.invalidArgument))), .none)
        }
    }

    // MARK: OS group

    /// `os_mgmt_info`: the fields `format` picks, in Zephyr's fixed order.
    private func applicationInfo(_ body: CBOR) throws(SMPDeviceError) -> CBOR {
        let request: SMPApplicationInfoRequest
        do { request = try SMPApplicationInfoRequest(body: body) } catch { throw SMPDeviceError(.general(.invalidArgument)) }
        let format = (request.format ?? "").isEmpty ? "s" : request.format!
        let fields: [(Character, String)] = [
            ("s", "Zephyr"), ("n", name), ("r", "3.7.0"), ("v", "3.7.0"), ("m", "arm"), ("p", "cortex-m4"),
            ("i", "bleota_sim"), ("o", "Zephyr"),
        ]
        let all = format.contains("a")
        var valid = 0
        for letter in format where letter == "a" || fields.contains(where: { $0.0 == letter }) { valid += 1 }
        guard valid == format.count else { throw SMPDeviceError(.os(.invalidFormat)) }
        let output = fields.filter { all || format.contains($0.0) }.map(\.1).joined(separator: " ")
        return SMPApplicationInfo(output: output).body
    }

    // MARK: Image group

    /// `img_mgmt_state_write`: marking never validates the image (MCUboot does at boot).
    private func setState(_ body: CBOR) throws(SMPDeviceError) {
        let request: SMPImageStateWriteRequest
        do { request = try SMPImageStateWriteRequest(body: body) } catch { throw SMPDeviceError(.general(.invalidArgument)) }
        // Firmware-loader mode has nothing to mark: what is in slot 0 boots if it verifies.
        if storage.snapshot.firmwareLoader != nil { throw SMPDeviceError(.general(.notSupported)) }
        let slots = storage.slots
        let type = storage.snapshot.swapType
        let target: SMPImageSlot
        if let hash = request.hash {
            guard hash.count == 32 else { throw SMPDeviceError(.image(.invalidHash)) }
            guard let found = slots.first(where: { $0.hash == hash }) else { throw SMPDeviceError(.image(.hashNotFound)) }
            target = found
        } else {
            guard request.confirm, let active = slots.first(where: \.active) else { throw SMPDeviceError(.image(.invalidHash)) }
            target = active
        }
        if !request.confirm && target.active { throw SMPDeviceError(.image(.imageSettingTestToActiveDenied)) }
        if target.image == 1 {
            // The network core: upgrade-only, so a test mark is as good as a permanent one.
            storage.withState { state in
                guard state.networkCore?.pending == false else { return }
                state.networkCore?.pending = true
                state.networkCore?.permanent = request.confirm
                state.markOrder.append(1)
            }
            return
        }
        switch type {
        case .test:
            // A test is pending: asking for that same test again is fine, anything else is not.
            guard !request.confirm && !target.active else { throw SMPDeviceError(.image(.imageAlreadyPending)) }
        case .permanent:
            guard request.confirm && !target.active else { throw SMPDeviceError(.image(.imageAlreadyPending)) }
        case .revert:
            // A test boot: confirming the running image makes it stay; confirming the
            // previous one is accepted and changes nothing; a new test must wait.
            guard request.confirm else { throw SMPDeviceError(.image(.imageAlreadyPending)) }
            guard target.active else { return }
            if confirmFailuresLeft > 0 {
                // `boot_set_next` failing with BOOT_EFLASH, which img_mgmt reports as a flash write error.
                confirmFailuresLeft -= 1
                throw SMPDeviceError(.image(.flashWriteFailed))
            }
            storage.withState { $0.primaryConfirmed = true }
        case .none:
            if target.active { return }  // confirming what already runs confirmed
            storage.withState { state in
                state.pendingSwap = request.confirm ? .permanent : .test
                state.markOrder.append(0)
            }
        }
    }

    /// Whether slot 1 may be written or erased (`img_mgmt_slot_in_use`): not while a
    /// swap is pending, nor while a test image runs unconfirmed (slot 1 holds the way back).
    private var secondaryInUse: Bool { storage.snapshot.swapType != .none }

    /// The same for `image`: the network core's slot 1 is in use while its update is marked.
    private func secondaryInUse(image: Int) -> Bool {
        image == 0 ? secondaryInUse : storage.snapshot.networkCore?.pending == true
    }

    private func erase(_ body: CBOR) throws(SMPDeviceError) {
        let request: SMPImageEraseRequest
        do { request = try SMPImageEraseRequest(body: body) } catch { throw SMPDeviceError(.general(.invalidArgument)) }
        let free = 1 - storage.snapshot.activeSlot
        let slot = request.slot ?? free
        guard slot == 0 || slot == 1 else { throw SMPDeviceError(.image(.invalidSlot)) }
        guard slot == free, !secondaryInUse else { throw SMPDeviceError(.image(.noFreeSlot)) }
        storage.withState { $0.secondary = nil }
        storage.withUpload { $0 = nil }
    }

    /// `img_mgmt_upload` and its inspection, in Zephyr's order of checks. Any
    /// refusal forgets the upload in progress; a chunk at the wrong offset is
    /// not an error: its answer says where the device is.
    private func upload(_ body: CBOR, environment: DeviceEnvironment) async throws(SMPDeviceError) -> CBOR {
        // A body that does not decode is refused before inspection: the upload stays as it was.
        let request: SMPUploadRequest?
        do { request = body["off"] == nil ? nil : try SMPUploadRequest(body: body) } catch { throw SMPDeviceError(.general(.invalidArgument)) }
        // Zephyr decodes `off` and `len` as unsigned: a negative one fails decoding (and
        // a negative length once trapped this device, found by FuzzSMPDevice).
        if let request, request.offset < 0 || (request.length ?? 0) < 0 { throw SMPDeviceError(.general(.invalidArgument)) }
        do throws(SMPDeviceError) {
            guard let request else { throw SMPDeviceError(.image(.invalidOffset)) }
            return try await uploadChecked(request, environment: environment)
        } catch {
            storage.withUpload { $0 = nil }
            throw error
        }
    }

    private func uploadChecked(_ request: SMPUploadRequest, environment: DeviceEnvironment) async throws(SMPDeviceError) -> CBOR {
        if request.offset == 0 {
            guard request.data.count >= 32 else { throw SMPDeviceError(.image(.invalidImageHeader)) }
            guard let length = request.length else { throw SMPDeviceError(.image(.invalidLength)) }
            guard MCUbootImage.startsWithMagic(request.data) else { throw SMPDeviceError(.image(.invalidImageHeaderMagic)) }
            if let sha = request.sha, sha.count > 32 { throw SMPDeviceError(.image(.invalidHash)) }
            // The same image again (by its SHA) resumes where the last upload stopped; nothing is written.
            // A single-image build ignores `image`; a multi-image one looks for image N's free slot
            // (`img_mgmt_get_unused_slot_area_id`) and, for an image it does not have, finds none.
            let image = storage.imageCount == 1 ? 0 : request.image
            guard image >= 0, image < storage.imageCount else { throw SMPDeviceError(.image(.noFreeSlot), reason: "no slot") }
            let resumed = storage.withUpload { upload -> Int? in
                guard let current = upload, current.image == image, let sha = request.sha, !sha.isEmpty, current.sha == sha else { return nil }
                return current.bytes.count
            }
            if let resumed { return SMPUploadResponse(offset: resumed).body }
            guard !secondaryInUse(image: image) else { throw SMPDeviceError(.image(.noFreeSlot)) }
            let loader = storage.snapshot.firmwareLoader != nil
            // The application of a firmware-loader device has no slot to take an upload; its loader writes slot 0.
            if loader, !storage.snapshot.inLoader { throw SMPDeviceError(.image(.noFreeSlot), reason: "no slot") }
            // A single-slot build has no slot beside the one it runs from.
            if !loader, !storage.snapshot.mode.hasSecondSlot { throw SMPDeviceError(.image(.noFreeSlot), reason: "no slot") }
            let slotSize = image == 0 ? storage.snapshot.slotSize : storage.snapshot.networkCore!.slotSize
            guard length <= slotSize else { throw SMPDeviceError(.image(.imageTooLarge)) }
            // `upgrade`: only a newer image than the running one (img_mgmt's vercmp, equal refused too).
            if request.upgrade == true {
                guard let offered = MCUbootImage.headerVersion(request.data),
                    let running = MCUbootImage.headerVersion(image == 0 ? storage.snapshot.primary : storage.snapshot.networkCore!.running)
                else { throw SMPDeviceError(.image(.versionGetFailed)) }
                guard offered > running else { throw SMPDeviceError(.image(.currentVersionIsNewer), reason: "downgrade") }
            }
            // The upload goes to the image's secondary slot, erased first.
            storage.withState { state in
                if loader {
                    state.primary = []  // the loader erases the application's slot before writing it
                } else if image == 0 {
                    state.secondary = nil
                } else {
                    state.networkCore?.secondary = nil
                }
            }
            storage.withUpload { $0 = SMPDeviceStorage.Upload(image: image, length: length, sha: request.sha, bytes: []) }
        }
        let progress = storage.withUpload { upload -> Result<(offset: Int, done: Bool, match: Bool?), SMPDeviceError>? in
            guard upload != nil else { return .success((0, false, nil)) }  // no upload: it expects offset 0
            // Not where the device is: drop the data and say where it is.
            guard request.offset == upload!.bytes.count else { return .success((upload!.bytes.count, false, nil)) }
            guard upload!.bytes.count + request.data.count <= upload!.length || request.offset == 0 else {
                return .failure(SMPDeviceError(.image(.imageDataOverrun)))
            }
            upload!.bytes.append(contentsOf: request.data)  // in place: no copy of what is already there
            let count = upload!.bytes.count
            let done = count >= upload!.length
            let match = done ? upload!.sha.map { $0 == SHA256Digest.hash(upload!.bytes.prefix(upload!.length)) } : nil
            return .success((count, done, match))
        }
        guard case .success(let state)? = progress else {
            if case .failure(let error)? = progress { throw error }
            return SMPUploadResponse(offset: 0).body
        }
        if environment.writeTimePerByte > .zero, !request.data.isEmpty, state.offset > request.offset {
            try? await environment.clock.sleep(for: environment.writeTimePerByte * request.data.count)
        }
        if state.done {
            // The upload is complete and leaves RAM; the slot holds what arrived, whatever its hash.
            let (image, bytes) = storage.withUpload { upload -> (Int, [UInt8]) in
                defer { upload = nil }
                return (upload?.image ?? 0, upload.map { Array($0.bytes.prefix($0.length)) } ?? [])
            }
            storage.withState { state in
                if state.firmwareLoader != nil {
                    state.primary = bytes
                } else if image == 0 {
                    state.secondary = bytes
                } else {
                    state.networkCore?.secondary = bytes
                }
            }
        }
        return SMPUploadResponse(offset: state.offset, match: state.match).body
    }

    // MARK: File-system group

    struct FileOffsetError: Error { var expected: Int }

    private func file(named body: CBOR) throws(SMPDeviceError) -> [UInt8] {
        guard let name = body["name"]?.string else { throw SMPDeviceError(.general(.invalidArgument)) }
        guard let file = storage.snapshot.files[name] else { throw SMPDeviceError(.fileSystem(.fileNotFound)) }
        return file
    }

    /// `fs_mgmt_file_upload`: writes through as it goes; a chunk at the wrong offset
    /// is an error carrying the offset expected, and closes the transfer.
    private func fileUpload(_ body: CBOR, version: SMPHeader.Version) throws -> CBOR {
        let request: SMPFileUploadRequest
        do { request = try SMPFileUploadRequest(body: body) } catch { throw SMPDeviceError(.general(.invalidArgument)) }
        guard !request.name.isEmpty, request.name.utf8.count <= 255 else { throw SMPDeviceError(.fileSystem(.invalidName)) }
        if request.offset == 0 {
            guard request.length != nil else { throw SMPDeviceError(.general(.invalidArgument)) }
            fileUpload = (request.name, 0, request.length)
            if !request.data.isEmpty { storage.withState { $0.files[request.name] = [] } }
        } else if fileUpload?.name != request.name {
            // A fresh context resumes at the file's current size.
            fileUpload = (request.name, storage.snapshot.files[request.name]?.count ?? 0, nil)
        }
        guard let context = fileUpload, request.offset == context.expected else {
            let expected = fileUpload?.expected ?? 0
            fileUpload = nil
            throw FileOffsetError(expected: expected)
        }
        storage.withState { $0.files[request.name, default: []].append(contentsOf: request.data) }
        let offset = context.expected + request.data.count
        fileUpload = (context.name, offset, context.length)
        if let length = context.length, length > 0, offset >= length { fileUpload = nil }
        return SMPFileOffsetResponse(offset: offset).body
    }

    private func fileDownload(_ body: CBOR) throws(SMPDeviceError) -> CBOR {
        let request: SMPFileDownloadRequest
        do { request = try SMPFileDownloadRequest(body: body) } catch { throw SMPDeviceError(.general(.invalidArgument)) }
        guard request.offset >= 0 else { throw SMPDeviceError(.general(.invalidArgument)) }
        guard let file = storage.snapshot.files[request.name] else { throw SMPDeviceError(.fileSystem(.fileNotFound)) }
        guard request.offset <= file.count else { throw SMPDeviceError(.fileSystem(.fileOffsetLargerThanFile)) }
        // Leave room for the header and the map's keys within the buffer.
        let chunk = min(file.count - request.offset, parameters.bufferSize - 48)
        let data = Array(file[request.offset..<request.offset + chunk])
        return SMPFileDownloadResponse(offset: request.offset, data: data, length: request.offset == 0 ? file.count : nil).body
    }

    static let hashTypes = SMPFileHashTypes(types: [("crc32", .init(format: 0, size: 4)), ("sha256", .init(format: 1, size: 32))])

    /// `fs_mgmt` hash/checksum: CRC-32 by default, SHA-256 on request, over `off`…`off+len`.
    private func fileHash(_ body: CBOR) throws(SMPDeviceError) -> CBOR {
        let request: SMPFileHashRequest
        do { request = try SMPFileHashRequest(body: body) } catch { throw SMPDeviceError(.general(.invalidArgument)) }
        let file = try file(named: body)
        let type = request.type ?? "crc32"
        guard Self.hashTypes.types.contains(where: { $0.name == type }) else { throw SMPDeviceError(.fileSystem(.checksumHashNotFound)) }
        let offset = request.offset ?? 0
        // Zephyr's len is unsigned: zero or negative is EINVAL (a negative one used to trap here).
        guard (request.length ?? 1) > 0 else { throw SMPDeviceError(.general(.invalidArgument)) }
        guard offset >= 0, offset < file.count else {
            throw SMPDeviceError(.fileSystem(file.isEmpty ? .fileEmpty : .fileOffsetLargerThanFile))
        }
        let length = min(request.length ?? (file.count - offset), file.count - offset)
        let slice = file[offset..<offset + length]
        let output: CBOR = type == "sha256" ? .bytes(SHA256Digest.hash(slice)) : CBOR(Int(CRC32.checksum(slice)))
        var pairs: [(key: CBOR, value: CBOR)] = [(.text("type"), .text(type))]
        if offset != 0 { pairs.append((.text("off"), CBOR(offset))) }
        pairs += [(.text("len"), CBOR(length)), (.text("output"), output)]
        return .map(pairs)
    }

    /// The factory image a simulated device starts with: a real (unsigned) MCUboot image.
    /// `linkedAt`: ROM-fixed for that address (a direct-XIP device's image in its slot 0).
    package static func factoryImage(version: MCUbootImage.Version, size: Int = 24 * 1024, linkedAt address: UInt32? = nil) -> [UInt8] {
        var generator = SeededRandom(seed: 0x5EED)
        let firmware = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
        guard let address else { return MCUbootImage.build(firmware: firmware, version: version) }
        return MCUbootImage.build(firmware: firmware, version: version, loadAddress: address, flags: .romFixed)
    }
}
