/// How a host half tells, from its own clock, whether it waited for the link: what the hosts
/// that send ahead of their answers (legacy DFU's groups, a described protocol's reads) use to
/// grow what goes ahead while the device keeps up.
enum AnswerTiming {
    /// A wait for an answer shorter than this found it already in: taking it off the link's queue
    /// takes microseconds, the shortest connection event 7.5 ms.
    static let alreadyIn = Duration.milliseconds(1)

    /// A request's write that took longer than this waited for the request before it (ATT lets one
    /// out at a time, until its Write Response): half the shortest connection interval. A write
    /// that went at once returns in microseconds; one held for a Write Response waits an event at least.
    static let waitedForTheRequestBefore = Duration.microseconds(3_750)
}
