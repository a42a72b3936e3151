import BleotaCodec
import BleotaLink
import Glibc

/// What a user asked of a connection's radio parameters (`ble://…?phy=2m&interval=7.5-15`).
public struct ConnectionRequest: Sendable, Hashable {
    public var phy: LEPHY?
    /// Connection interval bounds in milliseconds, 7.5…4000, multiples of 1.25 ms.
    public var interval: ClosedRange<Double>?
    public var latency: Int = 0

    public init(phy: LEPHY? = nil, interval: ClosedRange<Double>? = nil, latency: Int = 0) {
        self.phy = phy
        self.interval = interval
        self.latency = latency
    }

    public var isEmpty: Bool { phy == nil && interval == nil }

    /// Parses "7.5-15" or "15" (milliseconds); the error says what is valid.
    public static func parseInterval(_ text: String) -> Result<ClosedRange<Double>, BLEAddressError> {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false).map { Double($0) }
        guard (1...2).contains(parts.count), let low = parts.first ?? nil, let high = parts.last ?? nil else {
            return .failure(.init("ble:// interval '\(text)' is not MIN-MAX in milliseconds, e.g. interval=7.5-15"))
        }
        guard low >= 7.5, high <= 4000, low <= high else {
            return .failure(.init("ble:// interval '\(text)' is out of range: LE connection intervals are 7.5…4000 ms, MIN ≤ MAX"))
        }
        return .success(low...high)
    }
}

/// Sends HCI commands and waits for what answers them, one at a time, keeping
/// LE meta events that arrive early for whoever waits for them next.
public final class HCIController {
    let transport: any HCITransport
    let timeout: Duration
    let clock: any BleotaClock
    private var early: [HCIEvent] = []

    /// `clock` measures the timeouts; a controller flooding unrelated events cannot stretch them.
    public init(transport: any HCITransport, timeout: Duration = .seconds(2), clock: any BleotaClock = SystemClock()) {
        self.transport = transport
        self.timeout = timeout
        self.clock = clock
    }

    /// Keeps an LE event that arrived while waiting for something else, if anyone may wait for it.
    private func keep(_ event: HCIEvent) {
        guard case .leMeta(let subevent, _) = event,
            subevent == ConnectionControl.phyUpdateComplete || subevent == ConnectionControl.connectionUpdateComplete,
            early.count < 16
        else { return }
        early.append(event)
    }

    public enum Answer: Equatable {
        case complete([UInt8])
        case status(UInt8)

        /// The command's status either way (an empty Command Complete counts as "unspecified error").
        public var status: UInt8 {
            switch self {
            case .complete(let parameters): parameters.first ?? 0x1F
            case .status(let status): status
            }
        }
    }

    /// Sends `command` and returns its Command Complete parameters or Command Status.
    public func send(_ command: HCICommand) async throws(HCIError) -> Answer {
        try transport.write(command.encode())
        let answer = try await firstEvent(within: timeout) { event -> Answer? in
            switch event {
            case .commandComplete(let opcode, let parameters) where opcode == command.opcode: .complete(parameters)
            case .commandStatus(let status, let opcode) where opcode == command.opcode: .status(status)
            default: nil
            }
        }
        guard let answer else {
            throw HCIError("the controller did not answer HCI command 0x\(String(command.opcode, radix: 16)) within \(timeout)")
        }
        return answer
    }

    /// Reads events until `match` accepts one or `timeout` (on ``clock``) passes; the others are kept if wanted later.
    private func firstEvent<T>(within timeout: Duration, _ match: (HCIEvent) -> T?) async throws(HCIError) -> T? {
        let deadline = clock.now + timeout
        while clock.now < deadline {
            guard let packet = try await transport.read(timeout: deadline - clock.now),
                let event = try? HCIEvent(decoding: packet)
            else { continue }
            if let found = match(event) { return found }
            keep(event)
        }
        return nil
    }

    /// Waits for an LE meta `subevent` about connection `handle`; returns its parameters after the handle, or nil on timeout.
    /// Every subevent this waits for starts `[status][handle LE]`.
    public func waitForLEEvent(_ subevent: UInt8, handle: UInt16, timeout: Duration) async throws(HCIError) -> (status: UInt8, rest: [UInt8])? {
        func matches(_ event: HCIEvent) -> (UInt8, [UInt8])? {
            guard case .leMeta(let code, let parameters) = event, code == subevent, parameters.count >= 3,
                UInt16(parameters[1]) | UInt16(parameters[2]) << 8 == handle
            else { return nil }
            return (parameters[0], Array(parameters.dropFirst(3)))
        }
        if let index = early.firstIndex(where: { matches($0) != nil }) {
            return matches(early.remove(at: index))
        }
        return try await firstEvent(within: timeout, matches)
    }
}

/// Applies a ``ConnectionRequest`` to an open LE connection: PHY first (a
/// faster PHY changes what interval makes sense), then the interval, then
/// reads back what the controller settled on. A request the controller or the
/// peer cannot meet is not an error: the transfer still works, so the result
/// carries a note saying what was asked, what happened and why.
public enum ConnectionControl {
    static let phyUpdateComplete: UInt8 = 0x0C
    static let connectionUpdateComplete: UInt8 = 0x03

    public static func apply(
        _ request: ConnectionRequest, handle: UInt16, adapterName: String,
        controller: HCIController
    ) async -> ConnectionSettings {
        var settings = ConnectionSettings()
        var features: [UInt8]?
        if case .complete(let parameters)? = try? await controller.send(.leReadLocalSupportedFeatures),
            parameters.count >= 9, parameters[0] == 0
        {
            features = Array(parameters[1...8])
        }

        if let phy = request.phy {
            settings.notes += await setPHY(phy, handle: handle, adapterName: adapterName, features: features, controller: controller)
        }
        if let interval = request.interval {
            let (note, outcome) = await updateInterval(interval, latency: request.latency, handle: handle, controller: controller)
            if let note { settings.notes.append(note) }
            if let outcome {
                settings.intervalMilliseconds = outcome.interval
                settings.peripheralLatency = outcome.latency
                settings.supervisionTimeoutMilliseconds = outcome.timeout
            }
        }
        if case .complete(let parameters)? = try? await controller.send(.leReadPHY(handle: handle)),
            parameters.count >= 5, parameters[0] == 0, let phy = LEPHY(reported: parameters[3])
        {
            settings.phy = phy.displayName
            if let wanted = request.phy, wanted != phy, settings.notes.isEmpty {
                settings.notes.append("asked for the \(wanted.displayName) PHY; the link stays on \(phy.displayName)")
            }
        }
        return settings
    }

    static func setPHY(
        _ phy: LEPHY, handle: UInt16, adapterName: String, features: [UInt8]?,
        controller: HCIController
    ) async -> [String] {
        if let bit = phy.featureBit, let features, features[bit / 8] & (1 << (bit % 8)) == 0 {
            return ["\(adapterName) does not support the LE \(phy.displayName) PHY (its LE features lack it): the link stays on 1M"]
        }
        do {
            let status = try await controller.send(.leSetPHY(handle: handle, phy: phy)).status
            guard status == 0 else {
                return ["\(adapterName) refused to set the \(phy.displayName) PHY (\(hciStatusDescription(status)))"]
            }
            guard let (status, _) = try await controller.waitForLEEvent(phyUpdateComplete, handle: handle, timeout: .seconds(3)) else {
                return ["the \(phy.displayName) PHY was requested but no PHY update completed within 3 s"]
            }
            if status != 0 {
                return ["the peer did not take the \(phy.displayName) PHY (\(hciStatusDescription(status)))"]
            }
            return []
        } catch {
            return ["cannot set the PHY: \(error)"]
        }
    }

    /// The LE Connection Update asking for `interval` (milliseconds, rounded inwards to 1.25 ms steps)
    /// on the connection `handle`, with a supervision timeout that fits it.
    static func updateCommand(_ interval: ClosedRange<Double>, latency: Int, handle: UInt16) -> HCICommand {
        let low = UInt16((interval.lowerBound / 1.25).rounded(.up))
        let high = max(low, UInt16((interval.upperBound / 1.25).rounded(.down)))
        // The supervision timeout must exceed (1 + latency) × interval max × 2 (Vol 6, Part B, §4.5.2); 4 s is common.
        let minimumTimeout = Int((Double(1 + latency) * Double(high) * 1.25 * 2).rounded(.up)) + 10
        let timeout = UInt16(min(3200, max(400, (minimumTimeout + 9) / 10)))
        return HCICommand.leConnectionUpdate(handle: handle, interval: low...high, latency: UInt16(latency), supervisionTimeout: timeout)
    }

    static func updateInterval(
        _ interval: ClosedRange<Double>, latency: Int, handle: UInt16,
        controller: HCIController
    ) async -> (String?, (interval: Double, latency: Int, timeout: Int)?) {
        let command = updateCommand(interval, latency: latency, handle: handle)
        let range = "\(interval.lowerBound.millisecondsText)–\(interval.upperBound.millisecondsText) ms"
        do {
            let status = try await controller.send(command).status
            guard status == 0 else {
                return ("the controller refused the connection interval \(range) (\(hciStatusDescription(status)))", nil)
            }
            guard let (status, rest) = try await controller.waitForLEEvent(connectionUpdateComplete, handle: handle, timeout: .seconds(5)),
                rest.count >= 6
            else {
                return ("the connection interval \(range) was requested but no update completed within 5 s", nil)
            }
            guard status == 0 else {
                return ("the peer did not accept the connection interval \(range) (\(hciStatusDescription(status)))", nil)
            }
            let units = Double(UInt16(rest[0]) | UInt16(rest[1]) << 8)
            let granted = (
                interval: units * 1.25, latency: Int(UInt16(rest[2]) | UInt16(rest[3]) << 8),
                timeout: Int(UInt16(rest[4]) | UInt16(rest[5]) << 8) * 10
            )
            return (nil, granted)
        } catch {
            return ("cannot change the connection interval: \(error)", nil)
        }
    }
}
