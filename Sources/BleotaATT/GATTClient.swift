import BleotaCodec
import BleotaLink

/// A discovered service.
public struct GATTService: Sendable, Hashable {
    public var uuid: BluetoothUUID
    public var start: UInt16
    public var end: UInt16
}

/// A discovered characteristic.
public struct GATTCharacteristic: Sendable, Hashable {
    public var uuid: BluetoothUUID
    public var properties: CharacteristicProperties
    public var declaration: UInt16
    public var valueHandle: UInt16
    /// Last handle that belongs to it (before the next declaration or the service end).
    public var end: UInt16

    public init(uuid: BluetoothUUID, properties: CharacteristicProperties, declaration: UInt16, valueHandle: UInt16, end: UInt16) {
        self.uuid = uuid
        self.properties = properties
        self.declaration = declaration
        self.valueHandle = valueHandle
        self.end = end
    }
}

/// A discovered descriptor.
public struct GATTDescriptor: Sendable, Hashable {
    public var uuid: BluetoothUUID
    public var handle: UInt16
}

/// The GATT client procedures (Core v5.4, Vol 3, Part G, §4) over an ``ATTBearer``.
public struct GATTClient: Sendable {
    public let bearer: ATTBearer

    public init(bearer: ATTBearer) { self.bearer = bearer }

    /// Exchange MTU (§4.3.1); returns the MTU both sides now use.
    public func exchangeMTU() async throws(ATTBearerError) -> Int {
        let offer = bearer.preferredMTU
        let response = try await bearer.request(.exchangeMTURequest(clientMTU: UInt16(offer)))
        guard case .exchangeMTUResponse(let serverMTU) = response else { throw .closed("unexpected response") }
        await bearer.negotiated(peerMTU: Int(serverMTU))
        return await bearer.mtu
    }

    /// Discover All Primary Services (§4.4.1), or by UUID (§4.4.2).
    public func discoverPrimaryServices(_ uuid: BluetoothUUID? = nil) async throws(ATTBearerError) -> [GATTService] {
        var services: [GATTService] = []
        var start: UInt16 = 1
        while start != 0 {
            let pdu: ATTPDU =
                uuid.map { .findByTypeValueRequest(start: start, end: 0xFFFF, type: 0x2800, value: $0.littleEndian) }
                ?? .readByGroupTypeRequest(start: start, end: 0xFFFF, type: .primaryService)
            let response: ATTPDU
            do { response = try await bearer.request(pdu) } catch .peer(.attributeNotFound, _, _) { break }
            var last: UInt16 = 0
            switch response {
            case .readByGroupTypeResponse(let entries):
                for entry in entries {
                    var reader = ByteReader(entry.value)
                    let serviceUUID = try Self.uuid(&reader, size: entry.value.count)
                    services.append(GATTService(uuid: serviceUUID, start: entry.handle, end: entry.groupEnd))
                    last = max(last, entry.groupEnd)
                }
            case .findByTypeValueResponse(let ranges):
                for range in ranges {
                    services.append(GATTService(uuid: uuid!, start: range.found, end: range.groupEnd))
                    last = max(last, range.groupEnd)
                }
            default: throw .closed("unexpected \(response.opcode)")
            }
            guard last >= start, last < 0xFFFF else { break }
            start = last + 1
        }
        return services
    }

    /// Find Included Services (§4.5.1): the handles of services `service` includes.
    public func discoverIncludedServices(_ service: GATTService) async throws(ATTBearerError) -> [GATTService] {
        var included: [GATTService] = []
        var start = service.start
        while start <= service.end {
            let response: ATTPDU
            do { response = try await bearer.request(.readByTypeRequest(start: start, end: service.end, type: .include)) } catch .peer(.attributeNotFound, _, _) { break }
            guard case .readByTypeResponse(let entries) = response, let lastEntry = entries.last else { break }
            for entry in entries where entry.value.count == 6 {
                var reader = ByteReader(entry.value)
                let first = try Self.read16(&reader), end = try Self.read16(&reader)
                included.append(GATTService(uuid: .bit16(try Self.read16(&reader)), start: first, end: end))
            }
            guard lastEntry.handle < service.end else { break }
            start = lastEntry.handle + 1
        }
        return included
    }

    /// Discover All Characteristics of a Service (§4.6.1).
    public func discoverCharacteristics(_ service: GATTService) async throws(ATTBearerError) -> [GATTCharacteristic] {
        var found: [GATTCharacteristic] = []
        var start = service.start
        while start <= service.end {
            let response: ATTPDU
            do { response = try await bearer.request(.readByTypeRequest(start: start, end: service.end, type: .characteristic)) } catch .peer(.attributeNotFound, _, _) { break }
            guard case .readByTypeResponse(let entries) = response, let lastEntry = entries.last else { break }
            for entry in entries {
                var reader = ByteReader(entry.value)
                let properties = CharacteristicProperties(rawValue: try Self.read8(&reader))
                let valueHandle = try Self.read16(&reader)
                let uuid = try Self.uuid(&reader, size: entry.value.count - 3)
                found.append(
                    GATTCharacteristic(
                        uuid: uuid, properties: properties, declaration: entry.handle,
                        valueHandle: valueHandle, end: service.end))
            }
            guard lastEntry.handle < service.end else { break }
            start = lastEntry.handle + 1
        }
        for index in found.indices.dropLast() { found[index].end = found[index + 1].declaration - 1 }
        return found
    }

    /// Discover All Characteristic Descriptors (§4.7.1).
    public func discoverDescriptors(_ characteristic: GATTCharacteristic) async throws(ATTBearerError) -> [GATTDescriptor] {
        var descriptors: [GATTDescriptor] = []
        var start = characteristic.valueHandle + 1
        while start <= characteristic.end {
            let response: ATTPDU
            do { response = try await bearer.request(.findInformationRequest(start: start, end: characteristic.end)) } catch .peer(.attributeNotFound, _, _) { break }
            guard case .findInformationResponse(let entries) = response, let last = entries.last else { break }
            descriptors += entries.map { GATTDescriptor(uuid: $0.uuid, handle: $0.handle) }
            guard last.handle < characteristic.end else { break }
            start = last.handle + 1
        }
        return descriptors
    }

    /// Read Characteristic Value, continuing with Read Blob while the value fills the MTU (§4.8.1, §4.8.3).
    public func read(_ handle: UInt16) async throws(ATTBearerError) -> [UInt8] {
        guard case .readResponse(var value) = try await bearer.request(.readRequest(handle: handle)) else { throw .closed("unexpected response") }
        let chunk = await bearer.mtu - 1
        var last = value.count
        while last == chunk && value.count < 512 {
            let response: ATTPDU
            do { response = try await bearer.request(.readBlobRequest(handle: handle, offset: UInt16(value.count))) } catch .peer(.attributeNotLong, _, _) { break } catch .peer(
                .invalidOffset, _, _)
            { break }
            guard case .readBlobResponse(let part) = response else { throw .closed("unexpected response") }
            value += part
            last = part.count
        }
        return value
    }

    /// Write Characteristic Value (§4.9.3), or Write Long Characteristic Values
    /// with prepare and execute (§4.9.4) when it does not fit one request.
    /// `whenSent` is called when a Write Request has gone to the link, before its response
    /// (``ATTBearer/request(_:whenSent:)``); a long write calls it at its end.
    public func write(_ handle: UInt16, _ value: [UInt8], whenSent: (@Sendable () -> Void)? = nil) async throws(ATTBearerError) {
        let mtu = await bearer.mtu
        if value.count <= ATTLimits.largestValue(mtu: mtu) {
            _ = try await bearer.request(.writeRequest(handle: handle, value: value), whenSent: whenSent)
            return
        }
        defer { whenSent?() }
        var offset = 0
        while offset < value.count {
            let part = Array(value[offset..<min(value.count, offset + mtu - 5)])
            let response = try await bearer.request(.prepareWriteRequest(handle: handle, offset: UInt16(offset), part: part))
            guard case .prepareWriteResponse(handle, UInt16(offset), part) = response else {
                // The echo must match (§4.9.4); cancel what was queued.
                _ = try? await bearer.request(.executeWriteRequest(commit: false))
                throw .closed("prepare write echo did not match")
            }
            offset += part.count
        }
        _ = try await bearer.request(.executeWriteRequest(commit: true))
    }

    /// Write Without Response (§4.9.1). Suspends while the link's queue is full
    /// (the transport's flow control), never more than MTU − 3 bytes or 512 (``ATTLimits``).
    public func writeWithoutResponse(_ handle: UInt16, _ value: [UInt8]) async throws(ATTBearerError) {
        let maximum = ATTLimits.largestValue(mtu: await bearer.mtu)
        guard value.count <= maximum else { throw .tooLong(value.count, maximum: maximum) }
        try await bearer.command(.writeCommand(handle: handle, value: value))
    }

    /// Enables notifications (or indications) through the CCCD (§4.10, §3.3.3.3).
    /// Enables notifications (or indications). `afresh` first disables them:
    /// some servers tie state to the subscription (Zephyr's SMP transport drops a
    /// half-received request when its client unsubscribes), and a new
    /// connection should start clean.
    public func subscribe(_ characteristic: GATTCharacteristic, indications: Bool = false, afresh: Bool = false) async throws(ATTBearerError) {
        let descriptors = try await discoverDescriptors(characteristic)
        guard let cccd = descriptors.first(where: { $0.uuid == .clientCharacteristicConfiguration }) else {
            throw .peer(.attributeNotFound, request: .findInformationRequest, handle: characteristic.valueHandle)
        }
        if afresh { _ = try await bearer.request(.writeRequest(handle: cccd.handle, value: [0, 0])) }
        _ = try await bearer.request(.writeRequest(handle: cccd.handle, value: [indications ? 2 : 1, 0]))
    }

    private static func read8(_ reader: inout ByteReader) throws(ATTBearerError) -> UInt8 {
        do { return try reader.readUInt8("properties") } catch { throw .closed("malformed discovery response: \(error)") }
    }

    private static func read16(_ reader: inout ByteReader) throws(ATTBearerError) -> UInt16 {
        do { return try reader.readUInt16(.little, "handle") } catch { throw .closed("malformed discovery response: \(error)") }
    }

    private static func uuid(_ reader: inout ByteReader, size: Int) throws(ATTBearerError) -> BluetoothUUID {
        do { return try BluetoothUUID(decoding: &reader, size: size, field: "uuid") } catch {
            throw .closed("malformed discovery response: \(error)")
        }
    }
}

/// A GATT characteristic pair as a ``/BleotaLink/Link``: packets go out as Write Without
/// Response to `writeHandle`, and come in as notifications of `notifyHandle`.
/// This is how the transfer engine runs over GATT without knowing it.
public final class GATTLink: Link {
    public let client: GATTClient
    public let writeHandle: UInt16
    public let notifyHandle: UInt16
    public let parameters: LinkParameters
    /// The task running the bearer, awaited when the link closes.
    let runner: Task<Void, Never>?

    /// Call after the MTU exchange and the subscription; `runner` is the task running the bearer, if the link owns it.
    public init(
        client: GATTClient, writeHandle: UInt16, notifyHandle: UInt16, mtu: Int, description: String,
        runner: Task<Void, Never>? = nil
    ) {
        self.client = client
        self.runner = runner
        self.writeHandle = writeHandle
        self.notifyHandle = notifyHandle
        parameters = LinkParameters(
            maximumPayload: ATTLimits.largestValue(mtu: mtu), preferredPayload: ATTLimits.fullFragmentValue(mtu: mtu),
            acknowledgedWrites: false, description: description)
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        guard packet.count <= parameters.maximumPayload else {
            throw .payloadTooLarge(size: packet.count, maximum: parameters.maximumPayload)
        }
        do { try await client.writeWithoutResponse(writeHandle, packet) } catch { throw .disconnected("\(error)") }
    }

    public func receive() async throws(LinkError) -> [UInt8] {
        while true {
            let pdu: ATTPDU?
            do { pdu = try await client.bearer.incoming.take() } catch { throw .cancelled }
            guard let pdu else { throw .disconnected(await client.bearer.closeReason ?? "ATT bearer closed") }
            switch pdu {
            case .handleValueNotification(let handle, let value), .handleValueIndication(let handle, let value):
                if handle == notifyHandle { return value }
            case .multipleHandleValueNotification(let entries):
                if let entry = entries.first(where: { $0.handle == notifyHandle }) { return entry.value }
            default:
                continue
            }
        }
    }

    public func close() async {
        await client.bearer.close("closed by the host")
        await runner?.value
    }
}

/// The device side of ``GATTLink``: packets arrive as writes to an RX
/// characteristic and leave as notifications of a TX characteristic. This is
/// how a device half of a protocol (the simulator's, `bleota serve`'s) is
/// served over a real GATT server.
public final class GATTPeripheralLink: Link {
    public let server: GATTServer
    public let bearer: ATTBearer
    public let txHandle: UInt16
    let inbox: Mailbox<[UInt8]>

    init(server: GATTServer, bearer: ATTBearer, txHandle: UInt16, inbox: Mailbox<[UInt8]>) {
        self.server = server
        self.bearer = bearer
        self.txHandle = txHandle
        self.inbox = inbox
    }

    /// Follows the bearer's MTU, which the client may raise at any time.
    public var parameters: LinkParameters {
        LinkParameters(maximumPayload: ATTLimits.largestValue(mtu: bearer.currentMTU), description: "gatt-server")
    }

    /// Adds a packet service (RX: write + write without response; TX: notify)
    /// and returns a function that makes the link once a client's bearer exists.
    public static func addPacketService(
        to server: GATTServer, service: BluetoothUUID, rx: BluetoothUUID, tx: BluetoothUUID
    )
        -> (rxHandle: UInt16, txHandle: UInt16, makeLink: @Sendable (ATTBearer) async -> GATTPeripheralLink)
    {
        let inbox = Mailbox<[UInt8]>()
        // One UUID for both directions (MCUmgr's SMP characteristic): one characteristic, written and notifying.
        let definitions =
            rx == tx
            ? [CharacteristicDefinition(uuid: rx, properties: [.write, .writeWithoutResponse, .notify]) { inbox.put($0) }]
            : [
                CharacteristicDefinition(uuid: rx, properties: [.write, .writeWithoutResponse]) { inbox.put($0) },
                CharacteristicDefinition(uuid: tx, properties: [.notify]),
            ]
        let handles = server.addService(service, characteristics: definitions)
        let txHandle = handles[handles.count - 1]
        return (
            handles[0], txHandle,
            { bearer in
                GATTPeripheralLink(server: server, bearer: bearer, txHandle: txHandle, inbox: inbox)
            }
        )
    }

    public func send(_ packet: [UInt8]) async throws(LinkError) {
        let maximum = ATTLimits.largestValue(mtu: await bearer.mtu)
        guard packet.count <= maximum else { throw .payloadTooLarge(size: packet.count, maximum: maximum) }
        do {
            guard try await server.notify(txHandle, value: packet, on: bearer) else {
                throw LinkError.disconnected("the client has not subscribed to notifications")
            }
        } catch let error as LinkError { throw error } catch { throw .disconnected("\(error)") }
    }

    public func receive() async throws(LinkError) -> [UInt8] { try await inbox.nextWrite() }

    public func close() async {
        inbox.close()
        await bearer.close("closed by the device")
    }
}
