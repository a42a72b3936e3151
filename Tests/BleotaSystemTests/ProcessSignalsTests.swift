import BleotaLink
import Foundation
import Glibc
import Synchronization
import Testing

@testable import BleotaSystem

/// The one signal path: an observer is called on the signal thread for each
/// delivery, and not after it is cancelled. (Termination, Ctrl-C and the removal
/// of temporary paths are tested through the `bleota` process, which they end.)
@Suite(.serialized) struct ProcessSignalsTests {
    @Test func anObserverSeesEachSignalUntilCancelled() throws {
        let seen = Mutex(0)
        let arrived = DispatchSemaphore(value: 0)
        let observation = ProcessSignals.observe(SIGUSR2) {
            seen.withLock { $0 += 1 }
            arrived.signal()
        }
        for expected in 1...3 {
            kill(getpid(), SIGUSR2)
            // The signal thread runs the observer; a wait, not a sleep: it ends when the observer runs.
            #expect(arrived.wait(timeout: .now() + 10) == .success, "signal \(expected) was not observed")
            #expect(seen.withLock { $0 } == expected)
        }
        observation.cancel()
        // After cancelling, a second observer sees the signal and the first does not.
        let second = DispatchSemaphore(value: 0)
        let other = ProcessSignals.observe(SIGUSR2) { second.signal() }
        kill(getpid(), SIGUSR2)
        #expect(second.wait(timeout: .now() + 10) == .success)
        #expect(seen.withLock { $0 } == 3)
        other.cancel()
    }
}
