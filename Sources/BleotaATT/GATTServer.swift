import BleotaCodec
import BleotaLink
import Synchronization

/// Characteristic properties (Core v5.4, Vol 3, Part G, §3.3.1.1).
public struct CharacteristicProperties: OptionSet, Sendable, Hashable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let read = CharacteristicProperties(rawValue: 0x02)
    public static let writeWithoutResponse = CharacteristicProperties(rawValue: 0x04)
    public static let write = CharacteristicProperties(rawValue: 0x08)
    public static let notify = CharacteristicProperties(rawValue: 0x10)
    public static let indicate = CharacteristicProperties(rawValue: 0x20)
}

/// A characteristic a ``GATTServer`` serves.
public struct CharacteristicDefinition: Sendable {
    public var uuid: BluetoothUUID
    public var properties: CharacteristicProperties
    public var value: [UInt8]
    /// Called for every write (request or command) with the new value.
    public var onWrite: (@Sendable ([UInt8]) async -> Void)?
    /// Called for every write instead of ``onWrite`` when the firmware decides the answer:
    /// nil for taken, or the error code the Error Response carries.
    public var onWriteRequest: (@Sendable ([UInt8]) async -> ATTErrorCode?)?
    /// Called for every read: the value now (a counter the device keeps), or nil for the stored one.
    public var onRead: (@Sendable () async -> [UInt8]?)?

    public init(
        uuid: BluetoothUUID, properties: CharacteristicProperties, value: [UInt8] = [],
        onWrite: (@Sendable ([UInt8]) async -> Void)? = nil, onRead: (@Sendable () async -> [UInt8]?)? = nil
    ) {
        self.uuid = uuid
        self.properties = properties
        self.value = value
        self.onRead = onRead
        self.onWrite = onWrite
    }

    public init(
        uuid: BluetoothUUID, properties: CharacteristicProperties, value: [UInt8] = [],
        onWriteRequest: @escaping @Sendable ([UInt8]) async -> ATTErrorCode?, onRead: (@Sendable () async -> [UInt8]?)? = nil
    ) {
        self.uuid = uuid
        self.properties = properties
        self.value = value
        self.onRead = onRead
        self.onWriteRequest = onWriteRequest
    }
}

/// A GATT server: an attribute database answering ATT requests (Core v5.4,
/// Vol 3, Part G). Services are laid out in handle order as the
/// specification describes: service declaration, then per characteristic its
/// declaration, its value and, when it can notify or indicate, a Client
/// Characteristic Configuration descriptor (CCCD).
public final class GATTServer: ATTServerHandler {
    public struct Attribute: Sendable {
        public var handle: UInt16
        public var type: BluetoothUUID
        public var value: [UInt8]
        /// Group end, for service declarations.
        public var groupEnd: UInt16
        public var readable: Bool
        public var writable: Bool
        /// The level the link must have to read or write the attribute.
        public var security: SecurityLevel = .low
    }

    struct State {
        var attributes: [Attribute] = []
        var writeHandlers: [UInt16: @Sendable ([UInt8]) async -> ATTErrorCode?] = [:]
        var readHandlers: [UInt16: @Sendable () async -> [UInt8]?] = [:]
        /// CCCD handle → value handle.
        var cccdOf: [UInt16: UInt16] = [:]
        var subscriptions: [UInt16: UInt16] = [:]  // value handle → CCCD bits
        var prepared: [(handle: UInt16, offset: UInt16, part: [UInt8])] = []
        var attributeSecurity = SecurityLevel.low
        /// Write Commands dropped for want of security, for logs and tests.
        var droppedCommands = 0
    }

    private let state = Mutex(State())
    /// The security the link has now (the accepted socket's `BT_SECURITY`).
    private let linkSecurity: @Sendable () async -> SecurityLevel

    public init(linkSecurity: @escaping @Sendable () async -> SecurityLevel = { .low }) {
        self.linkSecurity = linkSecurity
    }

    /// The level characteristic values and descriptors added from now on demand.
    public var attributeSecurity: SecurityLevel {
        get { state.withLock { $0.attributeSecurity } }
        set { state.withLock { $0.attributeSecurity = newValue } }
    }

    /// Write Commands dropped because the link lacked the level their attribute demands.
    public var droppedCommands: Int { state.withLock { $0.droppedCommands } }

    /// What a request for `attribute` gets on the link as it is now: nil when allowed, else the
    /// error Zephyr answers (authentication for both: the client cannot know a key is missing).
    private func securityRefusal(_ attribute: Attribute) async -> ATTErrorCode? {
        guard attribute.security > .low else { return nil }
        return await linkSecurity() >= attribute.security ? nil : .insufficientAuthentication
    }

    /// Adds a primary service; returns the value handles of its characteristics, in order.
    @discardableResult
    public func addService(_ uuid: BluetoothUUID, characteristics: [CharacteristicDefinition]) -> [UInt16] {
        state.withLock { state in
            let security = state.attributeSecurity
            var next = UInt16((state.attributes.last?.handle ?? 0) + 1)
            let serviceIndex = state.attributes.count
            state.attributes.append(
                Attribute(
                    handle: next, type: .primaryService, value: uuid.littleEndian, groupEnd: next,
                    readable: true, writable: false))
            var valueHandles: [UInt16] = []
            for characteristic in characteristics {
                let declaration = next + 1, valueHandle = next + 2
                var declared: [UInt8] = [characteristic.properties.rawValue, UInt8(valueHandle & 0xFF), UInt8(valueHandle >> 8)]
                declared += characteristic.uuid.littleEndian
                state.attributes.append(
                    Attribute(
                        handle: declaration, type: .characteristic, value: declared, groupEnd: 0,
                        readable: true, writable: false))
                state.attributes.append(
                    Attribute(
                        handle: valueHandle, type: characteristic.uuid, value: characteristic.value, groupEnd: 0,
                        readable: characteristic.properties.contains(.read),
                        writable: !characteristic.properties.isDisjoint(with: [.write, .writeWithoutResponse]),
                        security: security))
                if let onWriteRequest = characteristic.onWriteRequest {
                    state.writeHandlers[valueHandle] = onWriteRequest
                } else if let onWrite = characteristic.onWrite {
                    state.writeHandlers[valueHandle] = { value in
                        await onWrite(value)
                        return nil
                    }
                }
                if let onRead = characteristic.onRead { state.readHandlers[valueHandle] = onRead }
                valueHandles.append(valueHandle)
                next = valueHandle
                if !characteristic.properties.isDisjoint(with: [.notify, .indicate]) {
                    next += 1
                    state.attributes.append(
                        Attribute(
                            handle: next, type: .clientCharacteristicConfiguration, value: [0, 0],
                            groupEnd: 0, readable: true, writable: true, security: security))
                    state.cccdOf[next] = valueHandle
                }
            }
            state.attributes[serviceIndex].groupEnd = next
            return valueHandles
        }
    }

    public var attributes: [Attribute] { state.withLock { $0.attributes } }

    /// Whether the client enabled notifications (bit 0) or indications (bit 1) for `valueHandle`.
    public func subscription(_ valueHandle: UInt16) -> UInt16 { state.withLock { $0.subscriptions[valueHandle] ?? 0 } }

    /// Notifies (or indicates) `value` on `valueHandle` if the client subscribed; returns whether it was sent.
    @discardableResult
    public func notify(_ valueHandle: UInt16, value: [UInt8], on bearer: ATTBearer) async throws(ATTBearerError) -> Bool {
        let bits = subscription(valueHandle)
        if bits & 1 != 0 {
            try await bearer.notify(handle: valueHandle, value: value)
            return true
        }
        if bits & 2 != 0 {
            try await bearer.indicate(handle: valueHandle, value: value)
            return true
        }
        return false
    }

    public func command(_ command: ATTPDU, bearer: ATTBearer) async {
        guard case .writeCommand(let handle, let value) = command else { return }
        if await write(handle, value) == .insufficientAuthentication {
            state.withLock { $0.droppedCommands += 1 }
        }
    }

    /// Writes a value; returns an error code or nil.
    private func write(_ handle: UInt16, _ value: [UInt8]) async -> ATTErrorCode? {
        if let attribute = attributes.first(where: { $0.handle == handle }), let refusal = await securityRefusal(attribute) { return refusal }
        let outcome: (ATTErrorCode?, (@Sendable ([UInt8]) async -> ATTErrorCode?)?) = state.withLock { state in
            guard let index = state.attributes.firstIndex(where: { $0.handle == handle }) else { return (.invalidHandle, nil) }
            guard state.attributes[index].writable else { return (.writeNotPermitted, nil) }
            if let valueHandle = state.cccdOf[handle] {
                guard value.count == 2 else { return (.invalidAttributeValueLength, nil) }
                state.subscriptions[valueHandle] = UInt16(value[0]) | UInt16(value[1]) << 8
            }
            state.attributes[index].value = value
            return (nil, state.writeHandlers[handle])
        }
        if outcome.0 == nil, let handler = outcome.1 { return await handler(value) }
        return outcome.0
    }

    public func respond(to request: ATTPDU, bearer: ATTBearer) async -> ATTPDU? {
        let mtu = await bearer.mtu
        switch request {
        case .readByGroupTypeRequest(let start, let end, let type):
            guard type == .primaryService || type == .secondaryService else {
                return .errorResponse(request: request.opcode, handle: start, error: .unsupportedGroupType)
            }
            let found = attributes.filter { $0.handle >= start && $0.handle <= end && $0.type == type }
            guard let first = found.first else { return .errorResponse(request: request.opcode, handle: start, error: .attributeNotFound) }
            // One response carries entries of one length, as many as fit.
            let entries = found.prefix { $0.value.count == first.value.count }
                .map { ATTPDU.GroupValue(handle: $0.handle, groupEnd: $0.groupEnd, value: $0.value) }
            return .readByGroupTypeResponse(Array(entries.prefix(max(1, (mtu - 2) / (4 + first.value.count)))))
        case .findByTypeValueRequest(let start, let end, let type, let value):
            let found = attributes.filter { $0.handle >= start && $0.handle <= end && $0.type == .bit16(type) && $0.value == value }
            guard !found.isEmpty else { return .errorResponse(request: request.opcode, handle: start, error: .attributeNotFound) }
            return .findByTypeValueResponse(found.prefix((mtu - 1) / 4).map { .init(found: $0.handle, groupEnd: max($0.groupEnd, $0.handle)) })
        case .readByTypeRequest(let start, let end, let type):
            let found = attributes.filter { $0.handle >= start && $0.handle <= end && $0.type == type && $0.readable }
            guard let first = found.first else { return .errorResponse(request: request.opcode, handle: start, error: .attributeNotFound) }
            if let refusal = await securityRefusal(first) { return .errorResponse(request: request.opcode, handle: first.handle, error: refusal) }
            let length = min(first.value.count, min(253, mtu - 4))
            let entries = found.prefix { $0.value.count == first.value.count }
                .map { ATTPDU.HandleValue(handle: $0.handle, value: Array($0.value.prefix(length))) }
            return .readByTypeResponse(Array(entries.prefix(max(1, (mtu - 2) / (2 + length)))))
        case .findInformationRequest(let start, let end):
            let found = attributes.filter { $0.handle >= start && $0.handle <= end }
            guard let first = found.first else { return .errorResponse(request: request.opcode, handle: start, error: .attributeNotFound) }
            let entries = found.prefix { $0.type.wireSize == first.type.wireSize }.map { ATTPDU.HandleUUID(handle: $0.handle, uuid: $0.type) }
            return .findInformationResponse(Array(entries.prefix(max(1, (mtu - 2) / (2 + first.type.wireSize)))))
        case .readRequest(let handle):
            guard let attribute = attributes.first(where: { $0.handle == handle }) else {
                return .errorResponse(request: request.opcode, handle: handle, error: .invalidHandle)
            }
            guard attribute.readable else { return .errorResponse(request: request.opcode, handle: handle, error: .readNotPermitted) }
            if let refusal = await securityRefusal(attribute) { return .errorResponse(request: request.opcode, handle: handle, error: refusal) }
            if let reader = state.withLock({ $0.readHandlers[handle] }), let live = await reader() {
                return .readResponse(value: Array(live.prefix(mtu - 1)))
            }
            return .readResponse(value: Array(attribute.value.prefix(mtu - 1)))
        case .readBlobRequest(let handle, let offset):
            guard let attribute = attributes.first(where: { $0.handle == handle }) else {
                return .errorResponse(request: request.opcode, handle: handle, error: .invalidHandle)
            }
            guard attribute.readable else { return .errorResponse(request: request.opcode, handle: handle, error: .readNotPermitted) }
            if let refusal = await securityRefusal(attribute) { return .errorResponse(request: request.opcode, handle: handle, error: refusal) }
            guard Int(offset) <= attribute.value.count else { return .errorResponse(request: request.opcode, handle: handle, error: .invalidOffset) }
            return .readBlobResponse(part: Array(attribute.value[Int(offset)...].prefix(mtu - 1)))
        case .readMultipleRequest(let handles):
            var values: [UInt8] = []
            for handle in handles {
                guard let attribute = attributes.first(where: { $0.handle == handle }), attribute.readable else {
                    return .errorResponse(request: request.opcode, handle: handle, error: .readNotPermitted)
                }
                if let refusal = await securityRefusal(attribute) { return .errorResponse(request: request.opcode, handle: handle, error: refusal) }
                values += attribute.value
            }
            return .readMultipleResponse(values: Array(values.prefix(mtu - 1)))
        case .writeRequest(let handle, let value):
            if let error = await write(handle, value) { return .errorResponse(request: request.opcode, handle: handle, error: error) }
            return .writeResponse
        case .prepareWriteRequest(let handle, let offset, let part):
            guard let attribute = attributes.first(where: { $0.handle == handle }) else {
                return .errorResponse(request: request.opcode, handle: handle, error: .invalidHandle)
            }
            guard attribute.writable else { return .errorResponse(request: request.opcode, handle: handle, error: .writeNotPermitted) }
            if let refusal = await securityRefusal(attribute) { return .errorResponse(request: request.opcode, handle: handle, error: refusal) }
            state.withLock { $0.prepared.append((handle, offset, part)) }
            return .prepareWriteResponse(handle: handle, offset: offset, part: part)
        case .executeWriteRequest(let commit):
            let queue = state.withLock { state in
                defer { state.prepared = [] }
                return state.prepared
            }
            guard commit else { return .executeWriteResponse }
            var values: [UInt16: [UInt8]] = [:]
            for item in queue {
                var value = values[item.handle] ?? []
                guard Int(item.offset) <= value.count else {
                    return .errorResponse(request: request.opcode, handle: item.handle, error: .invalidOffset)
                }
                value.replaceSubrange(Int(item.offset)..<min(value.count, Int(item.offset) + item.part.count), with: item.part)
                values[item.handle] = value
            }
            for (handle, value) in values.sorted(by: { $0.key < $1.key }) {
                if let error = await write(handle, value) { return .errorResponse(request: request.opcode, handle: handle, error: error) }
            }
            return .executeWriteResponse
        default:
            return nil
        }
    }
}
