import BleotaCodec
import BleotaEngine
import BleotaLink
import Testing

@testable import BleotaProtocols
@testable import BleotaSimulator

/// How one update with a vendor protocol ended: the report or error, and what the device runs.
struct VendorRun: Sendable {
    var outcome: Result<UpdateReport, TransferError>
    var running: [UInt8]
    var factory: [UInt8]
    var notes: [String]
}

/// One update against a simulated vendor device at `address`: `makeDevice` builds the device
/// half for the link model (with its factory image), `running` reads what it runs afterwards.
func simulateVendorUpdate<Device: DeviceHalf>(
    _ address: String, image: [UInt8], tuning: TransferTuning = TransferTuning(), knobs: Set<TuningKnob> = [],
    options: ProtocolOptions = ProtocolOptions(), speaking updateProtocol: any UpdateProtocol, deltaBase: DeltaBase? = nil,
    makeDevice: @escaping @Sendable (LinkModel) -> (Device, factory: [UInt8]),
    running: @escaping @Sendable (Device) async -> [UInt8],
    makeHost: @escaping @Sendable (HostContext) -> any ProtocolHost
) async throws -> VendorRun {
    let parsed = try SimulatorAddress(parsing: address)
    return try await SimulationRuntime.run { runtime in
        let world = SimulatedWorld(runtime: runtime, model: parsed.model, faults: parsed.faults, seed: parsed.seed)
        let (device, factory) = makeDevice(parsed.model)
        await world.add(
            SimulatedDevice(address: "C0:FF:EE:00:00:01", half: device, model: parsed.model, speaking: updateProtocol, whenQueueFull: parsed.whenQueueFull))
        let connector = SimulatedConnector(world: world, address: "C0:FF:EE:00:00:01", description: address)
        let events = SharedEvents()
        let host = makeHost(
            HostContext(
                protocolName: "vendor", connector: connector, clock: world.clock, tuning: tuning,
                explicitKnobs: knobs, options: options
            ) { events.append($0) })
        let outcome: Result<UpdateReport, TransferError>
        do throws(TransferError) {
            var prepared = PreparedImage(bytes: image, version: "2", summary: "test")
            prepared.deltaBase = deltaBase
            outcome = .success(try await host.flash(prepared, mode: .confirm))
        } catch { outcome = .failure(error) }
        // A reset under way finishes before the device is looked at.
        try? await world.clock.sleep(for: .seconds(2))
        let run = VendorRun(outcome: outcome, running: await running(device), factory: factory, notes: events.notes)
        await world.shutDown()
        return run
    }
}

/// Five seeded runs under `faults`: each ends with the exact image or a failure and the old one,
/// and at least `minimum` succeed (at most `maximum`, when given). A floor of 0 with no ceiling
/// could not fail, so it is refused: a sweep where nothing may succeed says so with `maximum: 0`.
func sweepVendorFaults(
    _ faults: String, minimum: Int, maximum: Int? = nil, image: (UInt64) -> [UInt8],
    run: (String, [UInt8]) async throws -> VendorRun
) async throws {
    try #require(minimum > 0 || maximum != nil, "\(faults): a floor of 0 with no ceiling cannot fail")
    var succeeded = 0
    for seed in 1...5 {
        let bytes = image(UInt64(seed))
        let outcome = try await run("sim://2m-dle?\(faults)&seed=\(seed)", bytes)
        switch outcome.outcome {
        case .success:
            let exact = outcome.running == bytes
            #expect(exact, "\(faults) seed \(seed): the device runs \(outcome.running.count) bytes, not the \(bytes.count) sent")
            succeeded += 1
        case .failure(let error):
            let old = outcome.running == outcome.factory
            #expect(old, "\(faults) seed \(seed): \(error)")
        }
    }
    print("fault sweep \(faults): \(succeeded) of 5 succeeded (floor \(minimum)\(maximum.map { ", ceiling \($0)" } ?? ""))")
    #expect(succeeded >= minimum, "\(faults): \(succeeded) of 5")
    if let maximum { #expect(succeeded <= maximum, "\(faults): \(succeeded) of 5, more than \(maximum)") }
}
