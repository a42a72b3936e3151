// Built with the Campaigns trait only (Package.swift): it needs PostgreSQL's client.
#if Campaigns
import BleotaEngine
import BleotaFleet
import BleotaTestSupport
import Foundation
import Testing

@testable import BleotaCampaign

/// Cohorts by version, bytes over the air and devices that need pairing, against a real
/// PostgreSQL server: what the campaign keeps and every worker reads back.
@Suite(.serialized) struct CampaignCohortStoreTests {
    @Test func aCampaignKeepsItsVersionsEachRowsPairingAndWhatWentOverTheAir() async throws {
        let server = try PostgresTestServer.start()
        defer { server.stop() }
        let address = try CampaignAddress(parsing: server.url)
        try await CampaignStore.withStore(address, logger: CampaignStoreTests.logger) { store in
            let devices = [
                FleetDevice(address: "ble://AA:BB:CC:DD:EE:01", label: "keyed", pairing: .passkey(42)),
                FleetDevice(address: "ble://AA:BB:CC:DD:EE:02", label: "bonded", pairing: .bonded),
                FleetDevice(address: "ble://AA:BB:CC:DD:EE:03", label: "plain"),
                FleetDevice(address: "ble://AA:BB:CC:DD:EE:04", label: "another"),
            ]
            let halt = CampaignRollout(halt: CampaignRollout.HaltRule(failedShare: 0.5, after: 2))
            let info = try await store.create(
                CampaignDefinition(
                    name: "cohort", imageName: "app.bin", image: Array(repeating: 0x5A, count: 8192), devices: devices,
                    versionLabel: "2.0.1", attempts: 1, backoffSeconds: 0, leaseSeconds: 60, rollout: halt, fromVersions: ["2.0.0", "1.9.0"]))
            #expect(info.fromVersions == ["2.0.0", "1.9.0"])
            #expect(try await store.info("cohort").fromVersions == ["2.0.0", "1.9.0"], "as every worker reads it")
            let claimed = try await store.claim(info, worker: "w1", limit: 4, adapters: [])
            #expect(claimed.map(\.device.pairing) == [.passkey(42), .bonded, nil, nil], "each row's answer comes back with its claim")
            #expect(claimed.map(\.device) == devices)
            // A patch went to the first; the second's pairing failed; two run other versions.
            #expect(
                try await store.record(
                    info, worker: "w1", claimed: claimed[0],
                    ending: .updated(versionBefore: "2.0.0", versionAfter: "2.0.1", seconds: 3, bytes: 8192, resends: 0, airBytes: 700)))
            #expect(
                try await store.record(
                    info, worker: "w1", claimed: claimed[1],
                    ending: .failed(
                        error: "pairing failed", step: "connect", deviceState: nil, seconds: 1, bytes: 0, resends: 0, retryAfter: nil)))
            for (index, version) in [(2, "1.0.0"), (3, nil as String?)] {
                #expect(
                    try await store.record(
                        info, worker: "w1", claimed: claimed[index],
                        ending: .otherVersion(version: version, reason: "the device runs \(version ?? "?"), not one of --from-version 2.0.0, 1.9.0", seconds: 0.5)))
            }
            let status = try await store.status("cohort")
            #expect(status.devices.map(\.state) == [.updated, .failed, .otherVersion, .otherVersion])
            #expect(status.devices[2].versionBefore == "1.0.0" && status.devices[2].error?.contains("not one of --from-version") == true)
            #expect(status.isFinished && status.endedAsAsked == 3)
            #expect(status.sentence == "4 devices: 1 updated, 1 failed, 2 another version's (left alone)")
            #expect(status.air == AirBytes(sent: 700, whole: 8192, patched: 1))
            // Devices left alone are not updates: 1 failure of 2 finished updates is the share, not 1 of 4.
            #expect(status.campaign.progress.haltReason?.hasPrefix("1 of 2 finished devices failed") == true, "\(status.campaign.progress)")
            let tries = try await store.tries("cohort")
            #expect(tries.map(\.outcome) == ["updated", "failed", "other-version", "other-version"])
        }
    }
}
#endif
