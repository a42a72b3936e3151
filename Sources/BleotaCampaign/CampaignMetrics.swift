// Built with the Campaigns trait only (Package.swift): the worker it counts for needs PostgreSQL.
#if Campaigns
import CoreMetrics
import Foundation
import Prometheus
import Synchronization

/// A worker's counters, kept through swift-metrics in a Prometheus registry of its own, for
/// `bleota fleet worker --metrics` to serve (``MetricsEndpoint``) and an operator's Prometheus to
/// scrape: devices by how their try ended and by stage, devices in flight, bytes sent, goodput.
///
/// The registry is this value's, not the process's global `MetricsSystem`, so a library user
/// running several workers (or a test) keeps each one's figures apart.
public final class CampaignMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    let factory: PrometheusMetricsFactory
    let campaign: String
    let worker: String
    /// Counters made so far, by metric and labels: one handle per label set.
    private let counters = Mutex<[String: CoreMetrics.Counter]>([:])
    private let updatedBytes = Mutex(0)
    let inFlight: CoreMetrics.Meter
    let goodput: CoreMetrics.Meter

    /// How a try ended, as the `outcome` label says it.
    public enum Outcome: String, Sendable, CaseIterable {
        case updated, skipped, failed
        /// Failed, and left for another try.
        case retried
        /// The worker lost the device's lease before it could record the end.
        case leaseLost = "lease_lost"
        /// It runs a version the campaign is not for (`--from-version`): left alone.
        case otherVersion = "other_version"
    }

    public init(campaign: String, worker: String) {
        self.campaign = campaign
        self.worker = worker
        factory = PrometheusMetricsFactory(registry: registry)
        let labels = [("campaign", campaign), ("worker", worker)]
        inFlight = CoreMetrics.Meter(label: "bleota_campaign_devices_in_flight", dimensions: labels, factory: factory)
        goodput = CoreMetrics.Meter(label: "bleota_campaign_goodput_bytes_per_second", dimensions: labels, factory: factory)
        inFlight.set(0)
        goodput.set(0.0)
        // Every outcome from the start, at 0: a rate over a series that appears late reads wrong.
        for outcome in Outcome.allCases { _ = counter("bleota_campaign_devices_total", stage: 0, outcome: outcome) }
        _ = counter("bleota_campaign_bytes_sent_total", stage: 0, outcome: nil)
    }

    func counter(_ name: String, stage: Int, outcome: Outcome?) -> CoreMetrics.Counter {
        var labels = [("campaign", campaign), ("worker", worker), ("stage", String(stage + 1))]
        if let outcome { labels.append(("outcome", outcome.rawValue)) }
        let key = name + labels.map { "\($0.0)=\($0.1)" }.joined(separator: ",")
        return counters.withLock { made in
            if let counter = made[key] { return counter }
            let counter = CoreMetrics.Counter(label: name, dimensions: labels, factory: factory)
            made[key] = counter
            return counter
        }
    }

    /// A try of a device of `stage` (0-based) ended so, having sent `sent` bytes over the air to
    /// deliver an image of `bytes`, `elapsed` into the worker's run (on its clock: goodput is the
    /// image bytes of updated devices over it, so a delta patch's saving shows as goodput).
    public func ended(_ outcome: Outcome, stage: Int, bytes: Int, sent: Int, elapsed: Duration) {
        counter("bleota_campaign_devices_total", stage: stage, outcome: outcome).increment()
        if sent > 0 { counter("bleota_campaign_bytes_sent_total", stage: stage, outcome: nil).increment(by: sent) }
        guard outcome == .updated else { return }
        let total = updatedBytes.withLock {
            $0 += bytes
            return $0
        }
        goodput.set(Double(total) / max(elapsed / .seconds(1), 0.001))
    }

    /// Devices this worker holds now (claimed and not yet recorded).
    public func holding(_ count: Int) { inFlight.set(count) }

    /// The registry in Prometheus' text exposition format (version 0.0.4).
    public func text() -> [UInt8] { registry.emitToBuffer() }
}
#endif
