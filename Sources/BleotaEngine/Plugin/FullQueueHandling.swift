/// What a device's firmware does with a packet that reaches it while every place of its receive
/// queue is taken: the difference between a slow device that loses writes and one that slows its link.
///
/// A Bluetooth LE controller never loses a data PDU for want of room: one that has nowhere to put
/// a packet does not acknowledge it, and the peer's link layer sends it again in a later pair
/// (Core v5.4, Vol 6, Part B, §4.5.9 — flow control). Whether writes are lost therefore depends on
/// where the firmware keeps them. Firmware that takes each write in its stack's event handler, to
/// the end, before the stack takes the next, leaves them in the stack's buffers and is
/// ``hold``: its link slows to its pace. Firmware that copies each write into a pool or ring of
/// its own and works on it later is ``drop``: a write that finds the pool empty is gone, and only
/// the protocol can say so (Nordic's `nrf_dfu_ble.c` gives up on a write it has no buffer for;
/// its receipts exist for that).
///
/// The simulator models both with the same queue of the link model's `deviceBuffer` places
/// (`protocols/link-model.md`): dropping at a full queue, or refusing the host's packet pair by
/// pair, as a controller with no room does, until a place is free. Each device half says which its firmware does; a `sim://` address
/// overrides it with `when-full=drop|hold`.
public enum FullQueueHandling: String, Sendable, Hashable, CaseIterable {
    /// The packet is lost: the firmware's own pool was empty.
    case drop
    /// The packet waits on the link until the firmware has taken one off its queue.
    case hold
}
