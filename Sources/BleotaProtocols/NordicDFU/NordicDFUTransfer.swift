import BleotaCodec
import BleotaEngine

/// Sending one part of a Nordic package (its init packet, then its image) to
/// a Secure DFU bootloader, as a pure state machine: answers, timeouts and
/// finished streams in, the next request or stream out. The host half
/// (``NordicSecureDFUUpdater``) performs the actions; tests drive it as a table.
///
/// What it decides:
/// - **Resume**: Select tells what the bootloader holds. An init packet whose
///   prefix matches is finished rather than resent; an image whose prefix
///   matches continues from the last whole object (an unexecuted complete
///   object is executed — a "not permitted" answer then only means it already
///   was); a prefix that does not match is rewound to an object boundary, and
///   the first Create's position is checked before data follows it.
/// - **Integrity**: every object's offset and CRC-32 are checked before it is
///   executed; an object that disagrees is created again (discarding what the
///   bootloader received of it) up to `objectRetries` times. An object whose
///   CRC failed is never executed.
/// - **Lost answers**: a request is sent again after a timeout; an Execute
///   whose answer is lost is followed by a Select, and the last one by a
///   probe of whether the device activated the image.
package struct NordicDFUTransfer: Sendable {
    package enum Action: Sendable, Equatable {
        /// Write this request to the control point and wait for its answer.
        case send(NordicDFURequest)
        /// Write these bytes of the init packet (command) or image (data) as packets, then call `streamed()`.
        case stream(NordicDFUObjectType, Range<Int>)
        /// Write Create(data, size) and, without waiting for its answer, the object's bytes as
        /// packets; pass the Create's answer, when it comes among the receipts, to
        /// ``answered(_:)``, and call `streamed()` at the end.
        case createAndStream(size: UInt32, Range<Int>)
        /// Wait this long, then call ``paused()`` (SDK 15–17 bootloaders prepare flash before the first data object).
        case pause(Duration)
        /// The last Execute's answer is missing: reconnect and report through ``activationProbed(inApplication:)``.
        case probeActivation
        /// The bootloader took the whole image and activates it.
        case finished
        case failed(TransferError)
    }

    enum Phase: Sendable, Equatable {
        case commandReceipts, selectCommand, createCommand, streamCommand, checkCommand, executeCommand
        case dataReceipts, selectData, createData, verifyCreate, streamData, checkData, executeData, paceData
        case executeResumed(at: Int)
        case probing, done
    }

    package let initPacket: [UInt8]
    package let image: [UInt8]
    /// Receipt notifications every this many data packets (0: none). Halved, down
    /// to 1, each time an object arrives damaged: receipts pace the sending, and a
    /// device that drops packets when flooded gets fewer at a time.
    package private(set) var receiptInterval: UInt16
    /// Delay before the first data object of a connection.
    package let firstObjectDelay: Duration
    /// Tries of an object whose CRC disagrees (3, as Nordic's libraries do).
    package let objectRetries: Int
    /// Timeouts in a row before giving up.
    package let timeoutLimit: Int
    /// False for a test transfer (`tune`): a fresh init packet, every object but
    /// the last executed, the last one checked but never executed, so nothing is activated.
    package let activates: Bool
    /// Whether a data object's packets follow its Create at once, rather than after the Create's
    /// answer: the bootloader takes requests and packets in the order they arrive (SDK 15–17
    /// `nrf_dfu_req_handler` queues both on one scheduler queue, and a packet write is a Write
    /// Command, which ATT lets go while a request waits), and its 17 receive buffers hold one
    /// object's packets while the Create erases. Not for the first object of a connection, which
    /// SDK 15–17 bootloaders may miss packets of while they prepare flash, nor for a Create whose
    /// landing must be checked first. Saves a round trip per object.
    package let pipelinesCreate: Bool

    private(set) var phase: Phase = .commandReceipts
    /// The refusal of the last Execute, kept while the probe finds out whether it was one: a damaged
    /// answer reads as a refusal while the device resets into the image.
    private var refusalOfLastExecute: TransferError?
    /// The data object being sent.
    package private(set) var objectStart = 0
    package private(set) var objectEnd = 0
    private var maximumObject = NordicBootloader.dataObjectMaximum
    private var attempts = 0
    /// Data objects that arrived damaged since one was last executed: the first is sent again as it
    /// was (one packet lost on air says nothing about the pace); the pace tightens from the second.
    private var damagedInARow = 0
    private var timeoutsInARow = 0
    private var pausedThisConnection = false
    /// A data object was created whole on this connection (its Create answered before its packets).
    private var createdThisConnection = false
    /// A Create was sent with its packets behind it, and its answer has not come yet.
    private var createAnswerPending = false
    /// Whether Creates still go ahead of their packets: not after an object sent so arrived
    /// damaged (a device that cannot hold an object's packets while it erases drops them).
    package private(set) var createsAhead = true
    /// The object being sent went behind its Create.
    private var objectWentAhead = false
    private var pendingAfterPause: Action?
    private var staleAnswerSkipped = false
    /// Objects sent again after a CRC mismatch, and their bytes.
    package private(set) var objectsResent = 0
    package private(set) var bytesResent = 0
    /// Bytes of the image the bootloader has executed.
    package private(set) var executedBytes = 0
    /// Bytes the device already held when this transfer began (a resumed update).
    package private(set) var resumedFrom = 0

    package init(
        initPacket: [UInt8], image: [UInt8], receiptInterval: UInt16 = 0, firstObjectDelay: Duration = .zero,
        objectRetries: Int = 3, timeoutLimit: Int = 6, activates: Bool = true, pipelinesCreate: Bool = false
    ) {
        self.initPacket = initPacket
        self.image = image
        self.receiptInterval = receiptInterval
        self.firstObjectDelay = firstObjectDelay
        self.objectRetries = max(1, objectRetries)
        self.timeoutLimit = max(1, timeoutLimit)
        self.activates = activates
        self.pipelinesCreate = pipelinesCreate
    }

    /// Starts (or, after a reconnection, restarts) from the bootloader's own account.
    package mutating func start() -> Action {
        pausedThisConnection = false
        createdThisConnection = false
        createAnswerPending = false
        timeoutsInARow = 0
        phase = .commandReceipts
        // No receipts while the init packet goes (Nordic's libraries do the same).
        return .send(.setReceiptNotification(packets: 0))
    }

    /// Restarts with the data, for a connection made after the init packet was executed.
    package mutating func restartWithData() -> Action {
        pausedThisConnection = false
        createdThisConnection = false
        createAnswerPending = false
        timeoutsInARow = 0
        phase = .dataReceipts
        return .send(.setReceiptNotification(packets: receiptInterval))
    }

    private func crc(upTo end: Int, of bytes: [UInt8]) -> UInt32 { CRC32.checksum(bytes[..<end]) }

    private func failure(_ code: TransferError.Code, _ step: UpdateStep, _ message: String) -> Action {
        .failed(TransferError(code, step: step, message))
    }

    private var expectedOperation: NordicDFUOperation? {
        switch phase {
        case .commandReceipts, .dataReceipts, .paceData: .setReceiptNotification
        case .selectCommand, .selectData: .select
        case .createCommand, .createData: .create
        case .checkCommand, .checkData, .verifyCreate: .calculateChecksum
        case .executeCommand, .executeData, .executeResumed: .execute
        case .streamCommand, .streamData, .probing, .done: nil
        }
    }

    /// An answer on the control point; nil when it answers nothing awaited
    /// (a late receipt, an answer to a request sent twice): keep waiting.
    package mutating func answered(_ response: NordicDFUResponse) -> Action? {
        if createAnswerPending, response.operation == .create {
            // The answer to a Create its packets went behind: only a refusal changes anything.
            createAnswerPending = false
            timeoutsInARow = 0
            return response.result == .success ? nil : refusal(response)
        }
        guard response.operation == expectedOperation else { return nil }
        timeoutsInARow = 0
        if response.result != .success {
            if case .executeResumed(let offset) = phase, response.result == .operationNotPermitted {
                // Nothing left to execute: the object was executed before the link dropped
                // (or, for the last one, the device may be activating it).
                guard offset < image.count else {
                    phase = .probing
                    return .probeActivation
                }
                return continueData(from: offset)
            }
            return refusal(response)
        }
        switch (phase, response.payload) {
        case (.commandReceipts, _):
            phase = .selectCommand
            return .send(.select(.command))
        case (.selectCommand, .selected(let maximum, let offset, let crc)):
            guard Int(maximum) >= initPacket.count else {
                return failure(
                    .deviceRefused, .transfer,
                    "the init packet is \(initPacket.count) bytes and this bootloader takes at most \(maximum): generate the package with the nrfutil of its SDK")
            }
            let held = Int(offset)
            if activates, held > 0, held <= initPacket.count, crc == self.crc(upTo: held, of: initPacket) {
                if held == initPacket.count {
                    phase = .executeCommand
                    return .send(.execute)
                }
                phase = .streamCommand
                return .stream(.command, held..<initPacket.count)
            }
            phase = .createCommand
            return .send(.create(.command, size: UInt32(initPacket.count)))
        case (.createCommand, _):
            phase = .streamCommand
            return .stream(.command, 0..<initPacket.count)
        case (.checkCommand, .checksum(let offset, let crc)):
            if Int(offset) == initPacket.count, crc == self.crc(upTo: initPacket.count, of: initPacket) {
                phase = .executeCommand
                return .send(.execute)
            }
            attempts += 1
            guard attempts < objectRetries else {
                return failure(.verificationFailed, .transfer, "the init packet arrived damaged \(attempts) times (the bootloader's CRC disagreed)")
            }
            phase = .createCommand
            return .send(.create(.command, size: UInt32(initPacket.count)))
        case (.executeCommand, _):
            attempts = 0
            phase = .dataReceipts
            return .send(.setReceiptNotification(packets: receiptInterval))
        case (.dataReceipts, _):
            phase = .selectData
            return .send(.select(.data))
        case (.selectData, .selected(let maximum, let offset, let crc)):
            guard maximum > 0 else { return failure(.protocolViolation, .transfer, "the bootloader's data objects hold 0 bytes") }
            maximumObject = Int(maximum)
            let held = Int(offset)
            if held <= image.count, crc == self.crc(upTo: held, of: image) {
                if resumedFrom == 0, executedBytes == 0 { resumedFrom = held }
                if held > 0, held % maximumObject == 0 || held == image.count {
                    // A whole object may wait unexecuted.
                    phase = .executeResumed(at: held)
                    return .send(.execute)
                }
                // Part of an object: the bootloader drops it at the next Create.
                return createObject(at: held - held % maximumObject, verify: held % maximumObject != 0)
            }
            // What it holds is not this image: rewind to an object boundary and check where the Create lands.
            let boundary = min(held, image.count) / maximumObject * maximumObject
            return createObject(at: boundary, verify: true)
        case (.createData, _):
            createdThisConnection = true
            if verifyNextCreate {
                verifyNextCreate = false
                phase = .verifyCreate
                return .send(.calculateChecksum)
            }
            phase = .streamData
            return .stream(.data, objectStart..<objectEnd)
        case (.verifyCreate, .checksum(let offset, let crc)):
            let at = Int(offset)
            if at == objectStart, crc == self.crc(upTo: at, of: image) {
                phase = .streamData
                return .stream(.data, objectStart..<objectEnd)
            }
            guard at <= image.count, at % maximumObject == 0, crc == self.crc(upTo: at, of: image), at != objectStart else {
                return failure(
                    .protocolViolation, .transfer,
                    "the bootloader holds \(at) bytes that are not the start of this image: start the update again (a new init packet clears it)")
            }
            return createObject(at: at, verify: true)
        case (.checkData, .checksum(let offset, let crc)):
            let at = Int(offset)
            if at == objectEnd, crc == self.crc(upTo: objectEnd, of: image) {
                return executeOrStop()
            }
            if at < objectEnd, at >= objectStart, crc == self.crc(upTo: at, of: image), !staleAnswerSkipped {
                // A receipt sent before the last packets arrived; the answer follows.
                staleAnswerSkipped = true
                return nil
            }
            objectsResent += 1
            bytesResent += objectEnd - objectStart
            if objectWentAhead {
                // Packets that came while the Create erased may have been dropped: wait for the
                // Create's answer from now on, and send the object again without counting a try.
                createsAhead = false
                return createObject(at: objectStart, verify: false)
            }
            damagedInARow += 1
            if damagedInARow == 1 {
                // The first damaged object since one was executed: once more as it was, without counting
                // a try. A packet lost on air costs this object, and halving the receipt interval for
                // it would cost every object after it (at 1 % loss on 2m-dle the interval fell from 17
                // to 1 over a 200 KiB image, each object a receipt a packet).
                return createObject(at: objectStart, verify: false)
            }
            if receiptInterval > 1 {
                // Lost packets again: pace harder before counting tries. Half, rounded up: the host cuts an
                // object into a multiple of the interval (17 packets become 2 receipts of 9), so the
                // last receipt is the object's checksum still.
                receiptInterval = max(1, (receiptInterval + 1) / 2)
                phase = .paceData
                return .send(.setReceiptNotification(packets: receiptInterval))
            }
            attempts += 1
            guard attempts < objectRetries else {
                return failure(
                    .verificationFailed, .transfer,
                    "the object at offset \(objectStart) arrived damaged \(attempts) times (the bootloader's CRC disagreed): the link loses too much, try a smaller --window or --packet-size"
                )
            }
            return createObject(at: objectStart, verify: false)
        case (.executeData, _):
            attempts = 0
            damagedInARow = 0
            executedBytes = objectEnd
            return continueData(from: objectEnd)
        case (.executeResumed(let offset), _):
            return continueData(from: offset)
        case (.paceData, _):
            return createObject(at: objectStart, verify: false)
        default:
            return failure(.protocolViolation, .transfer, "the bootloader's answer to \(response.operation) lacks its values")
        }
    }

    private var verifyNextCreate = false

    /// An object that checked out is executed — except the last one of a test transfer.
    private mutating func executeOrStop() -> Action {
        if !activates, objectEnd == image.count {
            phase = .done
            executedBytes = image.count
            return .finished
        }
        phase = .executeData
        return .send(.execute)
    }

    private mutating func createObject(at start: Int, verify: Bool) -> Action {
        objectStart = start
        objectEnd = min(start + maximumObject, image.count)
        verifyNextCreate = verify
        staleAnswerSkipped = false
        let size = UInt32(objectEnd - objectStart)
        objectWentAhead = pipelinesCreate && createsAhead && createdThisConnection && !verify
        if objectWentAhead {
            phase = .streamData
            createAnswerPending = true
            return .createAndStream(size: size, objectStart..<objectEnd)
        }
        phase = .createData
        let create = Action.send(.create(.data, size: size))
        if !pausedThisConnection, firstObjectDelay > .zero {
            pausedThisConnection = true
            pendingAfterPause = create
            return .pause(firstObjectDelay)
        }
        return create
    }

    private mutating func continueData(from offset: Int) -> Action {
        executedBytes = max(executedBytes, offset)
        guard offset < image.count else {
            phase = .done
            return .finished
        }
        return createObject(at: offset, verify: false)
    }

    /// A data Create was answered after `latency`, where a request the device answers at once
    /// (Select) takes `roundTrip`. An answer that waited for a long erase means packets sent behind
    /// a Create would wait that long in the bootloader's buffers, more than a device with few may
    /// hold: Creates then wait for their answers.
    package mutating func createAnswered(after latency: Duration, roundTrip: Duration) {
        if latency > roundTrip * 2 { createsAhead = false }
    }

    /// The pause is over.
    package mutating func paused() -> Action {
        defer { pendingAfterPause = nil }
        return pendingAfterPause ?? .send(.select(.data))
    }

    /// The bytes of the last ``Action/stream(_:_:)`` are written. `receipt`: the
    /// receipt notification that came with the last packet, if one did; when it
    /// accounts for the whole object it is the checksum, and no Calculate
    /// Checksum is needed (one round trip less per object).
    package mutating func streamed(receipt: (offset: UInt32, crc: UInt32)? = nil) -> Action {
        switch phase {
        case .streamCommand:
            phase = .checkCommand
        case .streamData:
            if let receipt, Int(receipt.offset) == objectEnd, receipt.crc == crc(upTo: objectEnd, of: image) {
                return executeOrStop()
            }
            phase = .checkData
        default:
            return failure(.protocolViolation, .transfer, "a stream finished that was not asked for")
        }
        return .send(.calculateChecksum)
    }

    /// No answer came in time: ask again, or find out where things stand.
    package mutating func timedOut() -> Action {
        timeoutsInARow += 1
        guard timeoutsInARow <= timeoutLimit else {
            return failure(.timeout, .transfer, "the bootloader stopped answering (\(timeoutsInARow) requests in a row)")
        }
        switch phase {
        case .commandReceipts: return .send(.setReceiptNotification(packets: 0))
        case .dataReceipts, .paceData: return .send(.setReceiptNotification(packets: receiptInterval))
        case .selectCommand: return .send(.select(.command))
        case .selectData: return .send(.select(.data))
        case .createCommand: return .send(.create(.command, size: UInt32(initPacket.count)))
        case .createData: return .send(.create(.data, size: UInt32(objectEnd - objectStart)))
        case .checkCommand, .checkData, .verifyCreate: return .send(.calculateChecksum)
        case .executeCommand: return .send(.execute)
        case .executeResumed: return .send(.execute)
        case .executeData:
            if objectEnd == image.count {
                // Its answer or the request is lost, or the device is already resetting into the image.
                phase = .probing
                return .probeActivation
            }
            // Whether it was executed, Select tells (a whole unexecuted object is executed then).
            phase = .selectData
            return .send(.select(.data))
        case .streamCommand, .streamData, .probing, .done:
            return failure(.protocolViolation, .transfer, "timed out while not waiting")
        }
    }

    /// After ``Action/probeActivation``: where the device came back.
    package mutating func activationProbed(inApplication: Bool) -> Action {
        guard inApplication else {
            if let refused = refusalOfLastExecute { return .failed(refused) }
            return failure(
                .verificationFailed, .verify,
                "the device stayed in its bootloader after the last object: it refused the image or never got the last Execute; run the same command again")
        }
        phase = .done
        executedBytes = image.count
        return .finished
    }

    private mutating func refusal(_ response: NordicDFUResponse) -> Action {
        let step: UpdateStep
        switch phase {
        case .executeCommand: step = .verify
        case .executeData where objectEnd == image.count: step = .verify
        default: step = .transfer
        }
        let what = phase == .executeCommand ? "the init packet" : step == .verify ? "the image" : "\(response.operation)"
        var message = "the bootloader refused \(what): "
        if response.result == .extendedError, let extended = response.extendedError {
            message += extended.description
        } else {
            message += Self.advice(response.result, phase: phase)
        }
        // What the bootloader refuses by its policy (the package's firmware, hardware or SoftDevice
        // version, its size) is a refusal, exit 4; only a hash or signature that fails is a verification.
        let policy: Set<NordicDFUExtendedError> = [.firmwareVersionFailure, .hardwareVersionFailure, .softDeviceVersionFailure, .insufficientSpace]
        let refusedByPolicy = response.result == .extendedError && response.extendedError.map(policy.contains) == true
        let code: TransferError.Code = step == .verify && !refusedByPolicy ? .verificationFailed : .deviceRefused
        if phase == .executeData, objectEnd == image.count {
            // Believed only once the device is seen still in its bootloader (the fault matrix met a
            // damaged answer to the last Execute while the device started the new application).
            refusalOfLastExecute = TransferError(code, step: step, message)
            phase = .probing
            return .probeActivation
        }
        return .failed(TransferError(code, step: step, message))
    }

    /// What to do about a plain result code, where it is known.
    static func advice(_ result: NordicDFUResult, phase: Phase) -> String {
        switch (result, phase) {
        case (.invalidObject, .executeCommand):
            "the init packet's signature does not verify or it does not decode: sign the package with the key the bootloader was built with"
        case (.insufficientResources, .executeCommand), (.insufficientResources, .createData):
            "the image does not fit the device's free flash"
        case (.insufficientResources, .createCommand):
            "the init packet is larger than the bootloader takes: generate it with the nrfutil of its SDK"
        case (.operationFailed, .executeCommand):
            "the signature has the wrong length or the bootloader could not store the init packet"
        default:
            "\(result)"
        }
    }
}
