import BleotaEngine

/// What happens in a fleet run, device by device: the live table draws these,
/// `--json` prints one a line.
public enum FleetEvent: Sendable {
    /// A try began on `adapter` (attempt 1, 2, …).
    case started(device: FleetDevice, adapter: String, attempt: Int)
    /// The device's update entered a step.
    case step(device: FleetDevice, step: UpdateStep)
    /// Transfer progress: bytes acknowledged of the total, the rate, packets resent.
    case progress(device: FleetDevice, acknowledged: Int, total: Int, bytesPerSecond: Double, resends: Int)
    /// The device is ready for its transfer and waits for one of its adapter's transfer places
    /// (``FleetOptions/transfersPerAdapter``).
    case queued(device: FleetDevice)
    case note(device: FleetDevice, text: String)
    /// A try failed and another comes after `delay`.
    case retrying(device: FleetDevice, error: TransferError, delay: Duration)
    case finished(DeviceResult)
    /// Ctrl-C: no new device starts; running ones finish.
    case stopping

    /// The device this event is about, if one.
    public var device: FleetDevice? {
        switch self {
        case .started(let device, _, _), .step(let device, _), .progress(let device, _, _, _, _), .queued(let device),
            .note(let device, _), .retrying(let device, _, _):
            device
        case .finished, .stopping:
            nil
        }
    }
}

/// One fleet event as `--json` prints it: a line each, `event` naming the kind.
public struct FleetEventLine: Codable, Sendable {
    public var event: String
    public var device: String?
    public var adapter: String?
    public var attempt: Int?
    public var step: String?
    public var acknowledged: Int?
    public var total: Int?
    public var bytesPerSecond: Double?
    public var resends: Int?
    public var text: String?
    public var error: String?
    public var retryInSeconds: Double?
    public var result: DeviceResult?

    public init(_ event: FleetEvent) {
        switch event {
        case .started(let device, let adapter, let attempt):
            self.event = "started"
            self.device = device.address
            self.adapter = adapter
            self.attempt = attempt
        case .step(let device, let step):
            self.event = "step"
            self.device = device.address
            self.step = step.rawValue
        case .progress(let device, let acknowledged, let total, let rate, let resends):
            self.event = "progress"
            self.device = device.address
            self.acknowledged = acknowledged
            self.total = total
            bytesPerSecond = rate
            self.resends = resends
        case .queued(let device):
            self.event = "queued"
            self.device = device.address
        case .note(let device, let text):
            self.event = "note"
            self.device = device.address
            self.text = text
        case .retrying(let device, let error, let delay):
            self.event = "retrying"
            self.device = device.address
            self.error = error.description
            retryInSeconds = delay.seconds
        case .finished(let result):
            self.event = "finished"
            device = result.device
            self.result = result
        case .stopping:
            self.event = "stopping"
        }
    }
}
