import BleotaCodec
import BleotaLink
import Synchronization
import Testing

@testable import BleotaATT

/// A link's security as a test sets it up: the levels pairing reaches, in order,
/// and every raise asked for.
final class ScriptedSecurity: LinkSecurityControl {
    private let state: Mutex<(level: SecurityLevel, reaches: [SecurityLevel], asked: [SecurityLevel], failure: PairingError?)>
    init(reaches: [SecurityLevel], failure: PairingError? = nil) {
        state = Mutex((.low, reaches, [], failure))
    }
    var asked: [SecurityLevel] { state.withLock { $0.asked } }
    var security: LinkSecurityState { get async { LinkSecurityState(level: state.withLock { $0.level }) } }
    func raiseSecurity(to level: SecurityLevel) async throws(PairingError) -> LinkSecurityState {
        let result = state.withLock { state -> Result<SecurityLevel, PairingError> in
            state.asked.append(level)
            if let failure = state.failure { return .failure(failure) }
            state.level = state.reaches.isEmpty ? level : state.reaches.removeFirst()
            return .success(state.level)
        }
        return LinkSecurityState(level: try result.get())
    }
}

/// Security on demand, BlueZ's `att.c` rule: an Error Response of Insufficient
/// Authentication, Encryption or Encryption Key Size raises the link's security
/// and repeats the request; other errors are returned as they came.
@Suite struct ATTSecurityTests {
    static let write = ATTPDU.writeRequest(handle: 0x0012, value: [1, 0])

    @Test func insufficientAuthenticationRaisesToMediumAndRepeatsTheRequestOnce() async throws {
        let security = ScriptedSecurity(reaches: [.medium])
        let seen = try await withBearer(security: security) { bearer, peer, _ in
            async let answer = bearer.request(Self.write)
            _ = try await peer.next()
            try await peer.send(.errorResponse(request: .writeRequest, handle: 0x0012, error: .insufficientAuthentication))
            _ = try await peer.next()
            try await peer.send(.writeResponse)
            #expect(try await answer == .writeResponse)
            return peer.received.withLock { $0 }
        }
        #expect(seen == [Self.write, Self.write])
        #expect(security.asked == [.medium])
    }

    @Test func justWorksWhereAuthenticationIsDemandedIsRaisedOnceMoreThenRefused() async throws {
        // Pairing reaches medium, the device still wants authentication: raise to high, which pairing
        // cannot reach either (still medium): the error says what was reached and what is wanted.
        let security = ScriptedSecurity(reaches: [.medium, .medium])
        let error = try await withBearer(security: security) { bearer, peer, _ -> ATTBearerError? in
            async let answer = bearer.request(Self.write)
            for _ in 0..<2 {
                _ = try await peer.next()
                try await peer.send(.errorResponse(request: .writeRequest, handle: 0x0012, error: .insufficientAuthentication))
            }
            do { _ = try await answer } catch let error as ATTBearerError { return error }
            return nil
        }
        #expect(error == ATTBearerError.security(.levelNotReached(wanted: .high, reached: .medium)))
        #expect(security.asked == [.medium, .high])
    }

    @Test func insufficientEncryptionAsksForMediumAndKeySizeForFIPS() {
        #expect(SecurityShortfall.encryption.levelNeeded(from: .low) == .medium)
        #expect(SecurityShortfall.encryption.levelNeeded(from: .medium) == nil)
        #expect(SecurityShortfall.authentication.levelNeeded(from: .low) == .medium)
        #expect(SecurityShortfall.authentication.levelNeeded(from: .medium) == .high)
        #expect(SecurityShortfall.authentication.levelNeeded(from: .high) == .fips)
        #expect(SecurityShortfall.authentication.levelNeeded(from: .fips) == nil)
        #expect(SecurityShortfall.encryptionKeySize.levelNeeded(from: .high) == .fips)
        #expect(ATTErrorCode.insufficientEncryptionKeySize.securityShortfall == .encryptionKeySize)
        #expect(ATTErrorCode.insufficientAuthorization.securityShortfall == nil)
    }

    @Test func aPairingFailureEndsTheRequestWithItsReason() async throws {
        let security = ScriptedSecurity(reaches: [], failure: .failed(.confirmValueFailed, byDevice: true))
        let error = try await withBearer(security: security) { bearer, peer, _ -> ATTBearerError? in
            async let answer = bearer.request(Self.write)
            _ = try await peer.next()
            try await peer.send(.errorResponse(request: .writeRequest, handle: 0x0012, error: .insufficientEncryption))
            do { _ = try await answer } catch let error as ATTBearerError { return error }
            return nil
        }
        #expect(error == ATTBearerError.security(.failed(.confirmValueFailed, byDevice: true)))
        #expect(
            error?.description == "pairing failed at the device: confirm value failed (the passkeys did not match): check the passkey the device shows and give it with --passkey")
    }

    @Test func otherErrorsAndBearersWithoutSecurityGetTheErrorAsItCame() async throws {
        let security = ScriptedSecurity(reaches: [.medium])
        let error = try await withBearer(security: security) { bearer, peer, _ -> ATTBearerError? in
            async let answer = bearer.request(Self.write)
            _ = try await peer.next()
            try await peer.send(.errorResponse(request: .writeRequest, handle: 0x0012, error: .writeNotPermitted))
            do { _ = try await answer } catch let error as ATTBearerError { return error }
            return nil
        }
        #expect(error == ATTBearerError.peer(.writeNotPermitted, request: .writeRequest, handle: 0x0012))
        #expect(security.asked.isEmpty)
        let plain = try await withBearer { bearer, peer, _ -> ATTBearerError? in
            async let answer = bearer.request(Self.write)
            _ = try await peer.next()
            try await peer.send(.errorResponse(request: .writeRequest, handle: 0x0012, error: .insufficientAuthentication))
            do { _ = try await answer } catch let error as ATTBearerError { return error }
            return nil
        }
        #expect(plain == ATTBearerError.peer(.insufficientAuthentication, request: .writeRequest, handle: 0x0012))
    }

    /// Core v5.4, Vol 3, Part H, §2.3.5.1 (Table 2.8), with Secure Connections and without.
    @Test func ioCapabilitiesChooseThePairingMethodAsTheCoreTableDoes() {
        typealias IO = PairingIOCapability
        func method(_ i: IO, _ r: IO, sc: Bool) -> String {
            let (method, input) = IO.method(initiator: i, responder: r, secureConnections: sc)
            switch (method, input) {
            case (.passkeyEntry, .initiator?): return "PE-i"
            case (.passkeyEntry, .responder?): return "PE-r"
            case (.passkeyEntry, .both?): return "PE-b"
            case (.numericComparison, _): return "NC"
            default: return "JW"
            }
        }
        let order: [IO] = [.displayOnly, .displayYesNo, .keyboardOnly, .noInputNoOutput, .keyboardDisplay]
        // Rows: initiator; columns: responder; "PE-i" = the initiator types.
        let secureConnections = [
            ["JW", "JW", "PE-r", "JW", "PE-r"],
            ["JW", "NC", "PE-r", "JW", "NC"],
            ["PE-i", "PE-i", "PE-b", "JW", "PE-i"],
            ["JW", "JW", "JW", "JW", "JW"],
            ["PE-i", "NC", "PE-r", "JW", "NC"],
        ]
        let legacy = [
            ["JW", "JW", "PE-r", "JW", "PE-r"],
            ["JW", "JW", "PE-r", "JW", "PE-r"],
            ["PE-i", "PE-i", "PE-b", "JW", "PE-i"],
            ["JW", "JW", "JW", "JW", "JW"],
            ["PE-i", "PE-i", "PE-r", "JW", "PE-r"],
        ]
        for (row, initiator) in order.enumerated() {
            for (column, responder) in order.enumerated() {
                #expect(method(initiator, responder, sc: true) == secureConnections[row][column], "SC \(initiator) × \(responder)")
                #expect(method(initiator, responder, sc: false) == legacy[row][column], "legacy \(initiator) × \(responder)")
            }
        }
    }
}

/// Core v5.4, Vol 3, Part F, §3.2.9: an attribute value is at most 512 bytes,
/// so no write carries more, whatever the MTU (Bumble's server drops a longer one silently).
@Suite struct AttributeValueLimitTests {
    @Test func writesCarryAtMost512BytesEvenAtMTU517() async throws {
        #expect(ATTLimits.largestValue(mtu: 517) == 512)
        #expect(ATTLimits.largestValue(mtu: 247) == 244)
        #expect(ATTLimits.largestValue(mtu: 23) == 20)
        let outcome = try await withBearer { bearer, peer, _ -> (Int, ATTBearerError?) in
            await bearer.negotiated(peerMTU: 517)
            let link = GATTLink(client: GATTClient(bearer: bearer), writeHandle: 3, notifyHandle: 5, mtu: await bearer.mtu, description: "test")
            try await link.send([UInt8](repeating: 1, count: 512))
            _ = try await peer.next()
            var refused: ATTBearerError?
            do throws(ATTBearerError) { try await GATTClient(bearer: bearer).writeWithoutResponse(3, [UInt8](repeating: 1, count: 513)) } catch { refused = error }
            return (link.parameters.maximumPayload, refused)
        }
        #expect(outcome.0 == 512)
        #expect(outcome.1 == ATTBearerError.tooLong(513, maximum: 512))
    }

    /// A host streams writes that fill whole 251-byte link-layer fragments (value + 7 header bytes):
    /// at MTU 517, 495 bytes in two fragments, where 512 would take a third for 17 bytes.
    @Test func streamedWritesFillWholeLinkLayerFragments() async throws {
        #expect(ATTLimits.fullFragmentValue(mtu: 517) == 495)
        #expect(ATTLimits.fullFragmentValue(mtu: 498) == 495)
        #expect(ATTLimits.fullFragmentValue(mtu: 497) == 244)
        #expect(ATTLimits.fullFragmentValue(mtu: 300) == 244)
        #expect(ATTLimits.fullFragmentValue(mtu: 247) == 244)
        #expect(ATTLimits.fullFragmentValue(mtu: 185) == 182, "one fragment or less: the largest value")
        #expect(ATTLimits.fullFragmentValue(mtu: 23) == 20)
        let preferred = try await withBearer { bearer, _, _ -> Int in
            await bearer.negotiated(peerMTU: 517)
            let link = GATTLink(client: GATTClient(bearer: bearer), writeHandle: 3, notifyHandle: 5, mtu: await bearer.mtu, description: "test")
            return link.parameters.preferredPayload
        }
        #expect(preferred == 495)
    }
}
