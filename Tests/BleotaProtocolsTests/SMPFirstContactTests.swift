import Testing

@testable import BleotaProtocols

/// `--connect-timeout` bounds SMP's first request (the parameters request), which over UDP and
/// serial is the only way to learn the device is there.
@Suite struct SMPFirstContactTests {
    @Test(
        arguments: [
            (Duration.seconds(2), 4), (.seconds(10), 20), (.milliseconds(100), 1), (.seconds(60), 30), (.milliseconds(1200), 2),
        ] as [(Duration, Int)])
    func theFirstRequestsTriesFitTheConnectTimeout(connect: Duration, attempts: Int) {
        let first = SMPUpdater.firstContact(connect: connect, response: .seconds(2), patience: 30)
        #expect(first.attempts == attempts)
        #expect(first.timeout * first.attempts <= connect)
        #expect(first.timeout <= .seconds(2))
    }
}
