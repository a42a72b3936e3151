import BleotaCodec
import BleotaEngine
import Testing

@testable import BleotaProtocols

/// The host's object transfer as a table: answers in, next request out.
@Suite struct NordicDFUTransferTests {
    static let initPacket = Array(repeating: UInt8(0x42), count: 70)
    static let image = (0..<9000).map { UInt8(truncatingIfNeeded: $0 &* 11) }

    static func ok(_ operation: NordicDFUOperation, _ payload: NordicDFUResponse.Payload = .none) -> NordicDFUResponse {
        NordicDFUResponse(operation: operation, payload: payload)
    }
    static func selected(_ max: Int, _ offset: Int, of bytes: [UInt8]) -> NordicDFUResponse {
        ok(.select, .selected(maximumSize: UInt32(max), offset: UInt32(offset), crc: CRC32.checksum(bytes[..<offset])))
    }
    static func checksum(_ offset: Int, of bytes: [UInt8]) -> NordicDFUResponse {
        ok(.calculateChecksum, .checksum(offset: UInt32(offset), crc: CRC32.checksum(bytes[..<offset])))
    }

    /// From the start to the first data object's Create, with the whole init packet already held.
    static func toFirstObject(_ machine: inout NordicDFUTransfer) {
        _ = machine.start()
        _ = machine.answered(ok(.setReceiptNotification))
        _ = machine.answered(selected(512, 70, of: initPacket))
        _ = machine.answered(ok(.execute))
        _ = machine.answered(ok(.setReceiptNotification))
        _ = machine.answered(selected(4096, 0, of: image))
    }

    @Test func aFreshUpdateGoesObjectByObject() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image, receiptInterval: 8)
        #expect(machine.start() == .send(.setReceiptNotification(packets: 0)))
        #expect(machine.answered(Self.ok(.setReceiptNotification)) == .send(.select(.command)))
        #expect(machine.answered(Self.selected(512, 0, of: Self.initPacket)) == .send(.create(.command, size: 70)))
        #expect(machine.answered(Self.ok(.create)) == .stream(.command, 0..<70))
        #expect(machine.streamed() == .send(.calculateChecksum))
        #expect(machine.answered(Self.checksum(70, of: Self.initPacket)) == .send(.execute))
        #expect(machine.answered(Self.ok(.execute)) == .send(.setReceiptNotification(packets: 8)))
        #expect(machine.answered(Self.ok(.setReceiptNotification)) == .send(.select(.data)))
        #expect(machine.answered(Self.selected(4096, 0, of: Self.image)) == .send(.create(.data, size: 4096)))
        for (start, end) in [(0, 4096), (4096, 8192), (8192, 9000)] {
            #expect(machine.answered(Self.ok(.create)) == .stream(.data, start..<end))
            #expect(machine.streamed() == .send(.calculateChecksum))
            #expect(machine.answered(Self.checksum(end, of: Self.image)) == .send(.execute))
            let next = machine.answered(Self.ok(.execute))
            #expect(next == (end == 9000 ? .finished : .send(.create(.data, size: UInt32(min(4096, 9000 - end))))))
        }
    }

    @Test func aMatchingInitPacketPrefixIsFinishedNotResentAndDataResumesAtTheLastObject() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image)
        _ = machine.start()
        _ = machine.answered(Self.ok(.setReceiptNotification))
        #expect(machine.answered(Self.selected(512, 30, of: Self.initPacket)) == .stream(.command, 30..<70))
        #expect(machine.streamed() == .send(.calculateChecksum))
        #expect(machine.answered(Self.checksum(70, of: Self.initPacket)) == .send(.execute))
        _ = machine.answered(Self.ok(.execute))
        _ = machine.answered(Self.ok(.setReceiptNotification))
        // 4096 bytes held: perhaps unexecuted, so Execute; "not permitted" means it already was.
        #expect(machine.answered(Self.selected(4096, 4096, of: Self.image)) == .send(.execute))
        #expect(machine.answered(NordicDFUResponse(operation: .execute, result: .operationNotPermitted)) == .send(.create(.data, size: 4096)))
        #expect(machine.answered(Self.ok(.create)) == .stream(.data, 4096..<8192))
        #expect(machine.resumedFrom == 4096)
    }

    @Test func aWholeInitPacketAlreadyThereIsExecutedAgainNotSent() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image)
        _ = machine.start()
        _ = machine.answered(Self.ok(.setReceiptNotification))
        #expect(machine.answered(Self.selected(512, 70, of: Self.initPacket)) == .send(.execute))
    }

    @Test func aDataPrefixThatIsNotThisImageIsRewoundAndTheCreatesPositionChecked() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image)
        _ = machine.start()
        _ = machine.answered(Self.ok(.setReceiptNotification))
        _ = machine.answered(Self.selected(512, 70, of: Self.initPacket))
        _ = machine.answered(Self.ok(.execute))
        _ = machine.answered(Self.ok(.setReceiptNotification))
        let other = NordicDFUResponse(operation: .select, payload: .selected(maximumSize: 4096, offset: 5000, crc: 0xDEAD_BEEF))
        #expect(machine.answered(other) == .send(.create(.data, size: 4096)), "rewound to the object boundary at 4096")
        #expect(machine.answered(Self.ok(.create)) == .send(.calculateChecksum), "where did the Create land?")
        // It landed at 0 (the bootloader had executed nothing): start there.
        #expect(machine.answered(Self.checksum(0, of: Self.image)) == .send(.create(.data, size: 4096)))
        #expect(machine.answered(Self.ok(.create)) == .send(.calculateChecksum))
        #expect(machine.answered(Self.checksum(0, of: Self.image)) == .stream(.data, 0..<4096))
    }

    /// The first damaged object is sent again as it was, not counted (a packet lost on air); from
    /// the second in a row the tries count, and the third gives up.
    @Test func anObjectWhoseCRCDisagreesIsCreatedAgainAndNeverExecutedThenGivenUpAfterThreeTries() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image, objectRetries: 3)
        Self.toFirstObject(&machine)
        var damaged = Self.image
        damaged[100] ^= 1
        for attempt in 0...3 {
            #expect(machine.answered(Self.ok(.create)) == .stream(.data, 0..<4096))
            #expect(machine.streamed() == .send(.calculateChecksum))
            let next = machine.answered(Self.checksum(4096, of: damaged))
            if attempt < 3 {
                #expect(next == .send(.create(.data, size: 4096)), "try \(attempt): the object again, not Execute")
            } else {
                guard case .failed(let error)? = next else {
                    Issue.record("expected a failure, got \(String(describing: next))")
                    return
                }
                #expect(error.step == .transfer && error.message.contains("arrived damaged 3 times"))
            }
        }
        #expect(machine.objectsResent == 4 && machine.executedBytes == 0)
    }

    @Test func aLateReceiptIsSkippedOnceAndAShortObjectThenRetried() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image, receiptInterval: 4)
        Self.toFirstObject(&machine)
        _ = machine.answered(Self.ok(.create))
        _ = machine.streamed()
        #expect(machine.answered(Self.checksum(976, of: Self.image)) == nil, "a receipt sent before the last packets arrived")
        // The tail really was lost: the object again as it was (one loss says nothing about the pace)...
        #expect(machine.answered(Self.checksum(3904, of: Self.image)) == .send(.create(.data, size: 4096)))
        #expect(machine.answered(Self.ok(.create)) == .stream(.data, 0..<4096))
        _ = machine.streamed()
        #expect(machine.answered(Self.checksum(3904, of: Self.image)) == nil, "skipped once per object")
        // ...and lost again before an object was executed: fewer packets between receipts, then the object.
        #expect(machine.answered(Self.checksum(3904, of: Self.image)) == .send(.setReceiptNotification(packets: 2)))
        #expect(machine.answered(Self.ok(.setReceiptNotification)) == .send(.create(.data, size: 4096)))
        #expect(machine.answered(Self.ok(.create)) == .stream(.data, 0..<4096))
        #expect(
            machine.streamed(receipt: (4096, CRC32.checksum(Self.image[..<4096]))) == .send(.execute),
            "a receipt for the object's last packet is its checksum")
        #expect(machine.objectsResent == 2 && machine.receiptInterval == 2)
        // Executed: the next damaged object is again sent as it was, at the same interval.
        _ = machine.answered(Self.ok(.execute))
        #expect(machine.answered(Self.ok(.create)) == .stream(.data, 4096..<8192))
        _ = machine.streamed()
        _ = machine.answered(Self.checksum(4096 + 976, of: Self.image))
        #expect(machine.answered(Self.checksum(8192 - 244, of: Self.image)) == .send(.create(.data, size: 4096)))
        #expect(machine.receiptInterval == 2)
    }

    /// After the first object of a connection, a Create and its packets go together: one round
    /// trip less per object. The first object waits for its Create's answer (SDK 15–17 bootloaders
    /// prepare flash then), and so does a Create whose landing is checked.
    @Test func afterTheFirstObjectTheCreateAndItsPacketsGoTogether() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image, receiptInterval: 17, pipelinesCreate: true)
        Self.toFirstObject(&machine)
        #expect(machine.answered(Self.ok(.create)) == .stream(.data, 0..<4096), "the first object waits for its Create's answer")
        #expect(machine.streamed(receipt: (4096, CRC32.checksum(Self.image[..<4096]))) == .send(.execute))
        #expect(machine.answered(Self.ok(.execute)) == .createAndStream(size: 4096, 4096..<8192))
        // Its answer comes among the receipts: a success changes nothing, and so does a stray one.
        #expect(machine.answered(Self.ok(.create)) == nil)
        #expect(machine.answered(Self.ok(.create)) == nil, "a second answer is not awaited")
        #expect(machine.streamed(receipt: (8192, CRC32.checksum(Self.image[..<8192]))) == .send(.execute))
        // Its answer lost: the receipt is what counts.
        #expect(machine.answered(Self.ok(.execute)) == .createAndStream(size: 808, 8192..<9000))
        _ = machine.streamed()
        #expect(machine.answered(Self.checksum(9000, of: Self.image)) == .send(.execute))
        #expect(machine.answered(Self.ok(.execute)) == .finished)
    }

    @Test func aCreateRefusedWhileItsPacketsWentEndsTheObjectWithTheRefusal() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image, receiptInterval: 17, pipelinesCreate: true)
        Self.toFirstObject(&machine)
        _ = machine.answered(Self.ok(.create))
        _ = machine.streamed(receipt: (4096, CRC32.checksum(Self.image[..<4096])))
        #expect(machine.answered(Self.ok(.execute)) == .createAndStream(size: 4096, 4096..<8192))
        guard case .failed(let error)? = machine.answered(NordicDFUResponse(operation: .create, result: .insufficientResources)) else {
            Issue.record("a refused Create went unnoticed")
            return
        }
        #expect(error.step == .transfer && error.message.contains("create"), "\(error.message)")
    }

    /// A device that cannot hold an object's packets while its Create erases drops some: the
    /// object goes again, without counting a try or fewer packets between receipts, and every
    /// Create after it waits for its answer.
    @Test func anObjectDamagedBehindItsCreateStopsCreatesGoingAhead() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image, receiptInterval: 17, pipelinesCreate: true)
        Self.toFirstObject(&machine)
        _ = machine.answered(Self.ok(.create))
        _ = machine.streamed(receipt: (4096, CRC32.checksum(Self.image[..<4096])))
        #expect(machine.answered(Self.ok(.execute)) == .createAndStream(size: 4096, 4096..<8192))
        _ = machine.answered(Self.ok(.create))
        #expect(machine.streamed() == .send(.calculateChecksum))
        let damaged = Self.ok(.calculateChecksum, .checksum(offset: 8192, crc: 0))
        #expect(machine.answered(damaged) == .send(.create(.data, size: 4096)))
        #expect(!machine.createsAhead && machine.receiptInterval == 17 && machine.objectsResent == 1)
        #expect(machine.answered(Self.ok(.create)) == .stream(.data, 4096..<8192))
        _ = machine.streamed(receipt: (8192, CRC32.checksum(Self.image[..<8192])))
        #expect(machine.answered(Self.ok(.execute)) == .send(.create(.data, size: 808)), "the Creates after it wait for their answers")
    }

    /// A Create answered only after a long erase: packets sent behind the next ones would wait in
    /// the bootloader's buffers as long, so Creates wait for their answers.
    @Test func aCreateSlowedByItsEraseKeepsCreatesWaiting() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image, receiptInterval: 17, pipelinesCreate: true)
        machine.createAnswered(after: .milliseconds(60), roundTrip: .milliseconds(30))
        #expect(machine.createsAhead, "twice the round trip: no erase worth the name")
        machine.createAnswered(after: .milliseconds(115), roundTrip: .milliseconds(30))
        #expect(!machine.createsAhead)
        Self.toFirstObject(&machine)
        _ = machine.answered(Self.ok(.create))
        _ = machine.streamed(receipt: (4096, CRC32.checksum(Self.image[..<4096])))
        #expect(machine.answered(Self.ok(.execute)) == .send(.create(.data, size: 4096)))
    }

    @Test func aNewConnectionWaitsForItsFirstCreateAgain() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image, receiptInterval: 17, pipelinesCreate: true)
        Self.toFirstObject(&machine)
        _ = machine.answered(Self.ok(.create))
        _ = machine.streamed(receipt: (4096, CRC32.checksum(Self.image[..<4096])))
        _ = machine.answered(Self.ok(.execute))
        // The link dropped during the second object: a new connection starts from the data's receipts.
        #expect(machine.restartWithData() == .send(.setReceiptNotification(packets: 17)))
        _ = machine.answered(Self.ok(.setReceiptNotification))
        #expect(machine.answered(Self.selected(4096, 4096, of: Self.image)) == .send(.execute))
        #expect(machine.answered(NordicDFUResponse(operation: .execute, result: .operationNotPermitted)) == .send(.create(.data, size: 4096)))
        #expect(machine.answered(Self.ok(.create)) == .stream(.data, 4096..<8192))
    }

    @Test func lostAnswersAreAskedForAgainAndALostLastExecuteIsProbed() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Array(Self.image[..<4096]))
        _ = machine.start()
        #expect(machine.timedOut() == .send(.setReceiptNotification(packets: 0)))
        _ = machine.answered(Self.ok(.setReceiptNotification))
        _ = machine.answered(Self.selected(512, 70, of: Self.initPacket))
        #expect(machine.timedOut() == .send(.execute), "executing a valid init packet again is harmless")
        _ = machine.answered(Self.ok(.execute))
        _ = machine.answered(Self.ok(.setReceiptNotification))
        _ = machine.answered(Self.selected(4096, 0, of: Self.image))
        _ = machine.answered(Self.ok(.create))
        _ = machine.streamed()
        _ = machine.answered(Self.checksum(4096, of: Self.image))
        #expect(machine.timedOut() == .probeActivation)
        #expect(machine.activationProbed(inApplication: true) == .finished)
    }

    /// A refusal of the last Execute is believed only once the device is seen still in its bootloader:
    /// a damaged answer reads as a refusal while the device starts the new application (the fault matrix met it).
    @Test(arguments: [true, false])
    func aRefusedLastExecuteIsProbedBeforeItIsBelieved(_ cameBackInApplication: Bool) {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Array(Self.image[..<4096]))
        _ = machine.start()
        _ = machine.answered(Self.ok(.setReceiptNotification))
        _ = machine.answered(Self.selected(512, 70, of: Self.initPacket))
        _ = machine.answered(Self.ok(.execute))
        _ = machine.answered(Self.ok(.setReceiptNotification))
        _ = machine.answered(Self.selected(4096, 0, of: Self.image))
        _ = machine.answered(Self.ok(.create))
        _ = machine.streamed()
        _ = machine.answered(Self.checksum(4096, of: Self.image))
        #expect(machine.answered(NordicDFUResponse(operation: .execute, result: .invalidParameter)) == .probeActivation)
        let outcome = machine.activationProbed(inApplication: cameBackInApplication)
        if cameBackInApplication {
            #expect(outcome == .finished)
        } else {
            guard case .failed(let error) = outcome else {
                Issue.record("expected the refusal")
                return
            }
            #expect(error.step == .verify && error.message.hasPrefix("the bootloader refused the image: "), "\(error.message)")
        }
    }

    @Test func refusalsBecomeOneLineThatSaysWhatToDo() {
        var machine = NordicDFUTransfer(initPacket: Self.initPacket, image: Self.image)
        _ = machine.start()
        _ = machine.answered(Self.ok(.setReceiptNotification))
        _ = machine.answered(Self.selected(512, 70, of: Self.initPacket))
        let refused = machine.answered(NordicDFUResponse(operation: .execute, result: .extendedError, extendedError: .hardwareVersionFailure))
        guard case .failed(let error)? = refused else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.step == .verify)
        #expect(error.message == "the bootloader refused the init packet: the package's hw_version does not match this device: generate it with the device's --hw-version")
        #expect(!error.message.contains("\n"))
    }
}
