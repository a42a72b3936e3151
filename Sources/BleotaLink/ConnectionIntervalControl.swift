/// A link whose connection interval its host may change while it is open: as
/// central, the LE Connection Update procedure (Bluetooth Core, Vol 6, Part B,
/// 5.1.1), which both controllers apply at an instant some connection events
/// after it is sent.
///
/// Why a host changes it: a link carries a limited number of packets per
/// connection event (by the controllers' buffers and event lengths), so a link
/// that has its radio to itself fills only part of a long interval, and more,
/// shorter events let it fill the air. Links that share a radio do the
/// opposite: each event ends at the next busy link's anchor and wastes what is
/// left of its slot, so they keep longer intervals. A fleet asks for
/// ``LEConnectionInterval/shortest`` for a transfer that will have its adapter
/// to itself to the end, and for the opening interval again when that changes
/// (`protocols/link-model.md`, "A link alone on its adapter").
public protocol ConnectionIntervalControl: Link {
    /// The interval the connection was opened with: the one it goes back to.
    var openingConnectionInterval: Duration { get }
    /// The interval in force now.
    var connectionInterval: Duration { get }
    /// Asks for `interval`. Returns at once: the change takes effect at a later
    /// connection event (after the update under way, if one is; of several
    /// requests waiting, the newest counts), or not at all when the link closes
    /// first or `interval` is outside ``LEConnectionInterval/allowed``.
    func requestConnectionInterval(_ interval: Duration)
}

/// The connection intervals Bluetooth LE allows.
public enum LEConnectionInterval {
    /// 7.5 ms, the shortest.
    public static let shortest = Duration.microseconds(7500)
    /// 4 s, the longest.
    public static let longest = Duration.seconds(4)
    public static let allowed = shortest...longest
    /// Connection events between an update's request and its instant: the
    /// Core asks the central to allow at least six.
    public static let eventsBeforeInstant = 6
}
