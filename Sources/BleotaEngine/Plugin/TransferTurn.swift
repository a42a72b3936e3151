import BleotaLink

/// An update's place among transfers that share one radio, as the engine sees it: waited for
/// when the update enters its transfer step (``OperationRecorder/enterTransfer(closing:)``) and
/// given back when it leaves it.
///
/// The engine knows only this; who hands places out, how many there are and in what order is a
/// fleet's (BleotaFleet's `TransferGate` and its `GatedTransferTurn`). A single update has none.
public protocol TransferTurn: AnyObject, Sendable {
    /// Whether the update holds its place now.
    var isHeld: Bool { get }
    /// Whether the last wait was withdrawn: the update should end, to start again elsewhere.
    var wasWithdrawn: Bool { get }
    /// The longest the update waits, connected and idle, before it transfers without a place; nil
    /// waits as long as it takes.
    var maximumWait: Duration? { get }
    /// Waits for a place unless one is held; true when one is held afterwards, false when the
    /// update should go on without one (the wait ran out, or was withdrawn or cancelled).
    @discardableResult
    func wait(clock: any BleotaClock) async -> Bool
    /// Gives the place back, if one is held; any number of calls.
    func release()
    /// Takes `link` as the update's link to the device, for a turn that sets its radio's pace
    /// (a shorter connection interval while its transfer is the only one).
    func adopt(_ link: any Link)
}
