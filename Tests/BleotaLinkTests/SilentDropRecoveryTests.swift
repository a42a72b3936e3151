import Testing

@testable import BleotaLink

/// A device that protects its characteristic but not its CCC descriptor drops every Write
/// Command on a link below what it wants, and the only sign is silence: what bleota does next
/// depends on what the link reached and what the pairing agent can answer.
@Suite struct SilentDropRecoveryTests {
    @Test func aSilentPlainLinkIsTriedOnceMoreEncrypted() {
        #expect(SilentDropRecovery.next(reached: .low, raised: false, canAuthenticate: false) == .retry(raisingTo: .medium))
        #expect(SilentDropRecovery.next(reached: .low, raised: false, canAuthenticate: true) == .retry(raisingTo: .medium))
    }

    @Test func silenceAfterJustWorksWithNoWayToAuthenticateIsAPairingFailure() {
        for raised in [false, true] {
            let step = SilentDropRecovery.next(reached: .medium, raised: raised, canAuthenticate: false)
            #expect(step == .fail(.unansweredWithoutAuthentication))
        }
        let message = PairingError.unansweredWithoutAuthentication.description
        #expect(message.contains("demands an authenticated link"))
        #expect(message.contains("--passkey"))
        #expect(message.contains("--accept-pairing"))
    }

    @Test func anUnauthenticatedLinkIsRaisedToAuthenticatedOnceWhenTheAgentCan() {
        #expect(SilentDropRecovery.next(reached: .medium, raised: false, canAuthenticate: true) == .retry(raisingTo: .high))
        guard case .report(let hint?) = SilentDropRecovery.next(reached: .medium, raised: true, canAuthenticate: true) else {
            Issue.record("a second silence was retried again")
            return
        }
        #expect(hint.contains("security medium either"))
    }

    /// Once: the retry is never retried, and a link that was already authenticated is not blamed on security.
    @Test func neverMoreThanOneRetry() {
        for level in SecurityLevel.allCases {
            for canAuthenticate in [false, true] {
                if case .retry = SilentDropRecovery.next(reached: level, raised: true, canAuthenticate: canAuthenticate) {
                    Issue.record("retried again at \(level.name)")
                }
            }
        }
        #expect(SilentDropRecovery.next(reached: .high, raised: false, canAuthenticate: true) == .report(hint: nil))
        #expect(SilentDropRecovery.next(reached: .fips, raised: false, canAuthenticate: false) == .report(hint: nil))
        #expect(SilentDropRecovery.next(reached: .low, raised: true, canAuthenticate: false) == .report(hint: SilentDropRecovery.plainLinkHint))
    }

    /// Every connector raises a new link before its first write by the same rule.
    @Test func theLevelBeforeTheFirstWrite() {
        #expect(SilentDropRecovery.levelBeforeWriting(asked: .low, expectsPairing: false, bonded: false) == .low)
        #expect(SilentDropRecovery.levelBeforeWriting(asked: .low, expectsPairing: true, bonded: false) == .medium)
        #expect(SilentDropRecovery.levelBeforeWriting(asked: .low, expectsPairing: false, bonded: true) == .medium)
        #expect(SilentDropRecovery.levelBeforeWriting(asked: .high, expectsPairing: true, bonded: true) == .high)
    }

    /// What the user said decides whether a connector pairs before it writes, and whether pairing can authenticate.
    @Test func theOptionsThatExpectPairing() {
        #expect(!PairingPolicy.justWorks.expectsPairing)
        #expect(!PairingPolicy.justWorks.canAuthenticate)
        #expect(PairingPolicy(passkey: 123_456).expectsPairing)
        #expect(PairingPolicy(passkey: 123_456).canAuthenticate)
        #expect(PairingPolicy(acceptsComparison: true).expectsPairing)
        #expect(PairingPolicy(acceptsComparison: true).canAuthenticate)
    }
}
