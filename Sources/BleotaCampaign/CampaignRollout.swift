import BleotaLink

/// How a campaign goes out: in stages, each a larger part of the device list, and halting when
/// too many of the devices finished have failed.
///
/// This is what operators of other update services mean by a rollout (AWS IoT Jobs' abort
/// criteria, Memfault's and Mender's phased cohorts): a canary of a few devices, then 5 %,
/// 25 %, everyone, and a threshold that stops new claims on every host at once. The value is
/// pure — which device is in which stage, whether a failure count halts — so its rules are table
/// tests; ``CampaignStore`` keeps it in the database and applies it in the claim's transaction.
public struct CampaignRollout: Sendable, Codable, Equatable {
    /// One stage: how much of the device list has been offered once it is open.
    public struct Stage: Sendable, Codable, Equatable {
        /// How far a stage reaches: a number of devices, or a share of the list (rounded up).
        /// Either counts every device of the stages before it too, so `canary=10, 5%, 100%` over
        /// 1 000 devices offers 10, then 40 more, then the other 950.
        public enum Reach: Sendable, Codable, Equatable {
            case devices(Int)
            /// Percent of the list, above 0 and at most 100.
            case percent(Double)
        }

        public var name: String
        public var reach: Reach

        public init(name: String, reach: Reach) {
            self.name = name
            self.reach = reach
        }

        /// `NAME=SIZE` or `SIZE`, where SIZE is a count (`10`) or a share (`5%`): `canary=10`, `25%`.
        public init(parsing text: String) throws(CampaignError) {
            let parts = text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            let size = parts.count == 2 ? parts[1] : parts[0]
            let name = parts.count == 2 ? parts[0] : size
            guard !name.isEmpty else { throw .badRollout("--stage '\(text)' has an empty name: write NAME=SIZE, as canary=10, or a size alone, as 25%") }
            if size.hasSuffix("%") {
                guard let percent = Double(size.dropLast()), percent > 0, percent <= 100 else {
                    throw .badRollout("--stage '\(text)': '\(size)' is not a share above 0 % and at most 100 %: write it as 5% or 100%")
                }
                self.init(name: name, reach: .percent(percent))
            } else {
                guard let count = Int(size), count > 0 else {
                    throw .badRollout("--stage '\(text)': '\(size)' is neither a device count above 0 nor a share: write canary=10 or 25%")
                }
                self.init(name: name, reach: .devices(count))
            }
        }

        /// Devices offered once this stage is open, of a list of `total`.
        public func reach(of total: Int) -> Int {
            switch reach {
            case .devices(let count): min(total, count)
            case .percent(let percent): min(total, Int((Double(total) * percent / 100 - 1e-9).rounded(.up)))
            }
        }

        /// As it was written: `canary=10`, `25%`.
        public var text: String {
            let size =
                switch reach {
                case .devices(let count): "\(count)"
                case .percent(let percent): "\(percent.formatted(decimals: 2))%"
                }
            return name == size ? size : "\(name)=\(size)"
        }
    }

    /// When the stage after a finished one opens.
    public enum StageWait: Sendable, Codable, Equatable {
        /// As soon as every device of the stages open so far has finished.
        case none
        /// That long after the last of them finished.
        case seconds(Double)
        /// When an operator says so (`bleota fleet campaign advance`).
        case operatorAdvance
    }

    /// Which failures a halt counts.
    public enum FailureKind: String, Sendable, Codable, CaseIterable {
        /// Every failed device.
        case any
        /// Devices that failed cleanly: untouched, still running their old image.
        case clean
        /// Devices that failed late or unknown: in the bootloader, unconfirmed, unreachable, or
        /// whose worker died holding them.
        case late
    }

    /// When new claims stop: `failedShare` of the devices finished (since the campaign began, or
    /// since it was last resumed) have failed of `counting`'s kind, once at least `after` devices
    /// have finished.
    public struct HaltRule: Sendable, Codable, Equatable {
        /// Above 0 and at most 1.
        public var failedShare: Double
        public var after: Int
        public var counting: FailureKind

        public init(failedShare: Double, after: Int = 1, counting: FailureKind = .any) {
            self.failedShare = failedShare
            self.after = max(1, after)
            self.counting = counting
        }

        /// The share as a percentage: `5%`, `7.5%`.
        public var shareText: String { "\((failedShare * 100).formatted(decimals: 2))%" }

        /// `5%` (or `0.05`): the share of `--halt-when-failed`.
        public static func share(parsing text: String) throws(CampaignError) -> Double {
            let share: Double? = text.hasSuffix("%") ? Double(text.dropLast()).map { $0 / 100 } : Double(text)
            guard let share, share > 0, share <= 1 else {
                throw .badRollout("--halt-when-failed '\(text)' is not a share above 0 and at most 100 %: write it as 5%")
            }
            return share
        }

        /// Why the campaign halts with these counts, or nil when it goes on. `finished` counts the
        /// devices that reached updated, skipped or failed; `clean` and `late` the failed ones of
        /// each kind (their sum is every failure).
        public func verdict(finished: Int, clean: Int, late: Int) -> String? {
            let failed =
                switch counting {
                case .any: clean + late
                case .clean: clean
                case .late: late
                }
            guard finished >= after, finished > 0, failed > 0 else { return nil }
            let share = Double(failed) / Double(finished)
            guard share >= failedShare - 1e-12 else { return nil }
            let kind =
                switch counting {
                case .any: "failed"
                case .clean: "failed cleanly (old image, untouched)"
                case .late: "failed late or unknown"
                }
            return "\(failed) of \(finished) finished devices \(kind) (\((share * 100).formatted(decimals: 1)) %), reaching --halt-when-failed \(shareText)"
                + (after > 1 ? " after at least \(after)" : "")
        }
    }

    /// The hours of the day, in a named time zone, in which devices may be claimed: a
    /// maintenance window. One that ends before it starts runs past midnight (22:00-02:00).
    public struct ClaimWindow: Sendable, Codable, Equatable {
        /// Minutes after midnight: the first minute in, and the first minute out.
        public var start: Int
        public var end: Int
        /// An IANA time zone name (`Europe/Berlin`): the hosts' local time, named in the campaign so
        /// that every host and the database read the window alike.
        public var zone: String

        public init(start: Int, end: Int, zone: String) {
            self.start = start
            self.end = end
            self.zone = zone
        }

        /// `HH:MM-HH:MM` in `zone`.
        public init(parsing text: String, zone: String) throws(CampaignError) {
            let parts = text.split(separator: "-", omittingEmptySubsequences: false)
            func minute(_ part: Substring) -> Int? {
                let fields = part.split(separator: ":", omittingEmptySubsequences: false)
                guard fields.count == 2, fields.allSatisfy({ $0.count == 2 }), let hour = Int(fields[0]), let minute = Int(fields[1]),
                    (0...24).contains(hour), (0..<60).contains(minute), hour * 60 + minute <= 24 * 60
                else { return nil }
                return hour * 60 + minute
            }
            guard parts.count == 2, let start = minute(parts[0]), let end = minute(parts[1]) else {
                throw .badRollout("--window '\(text)' is not HH:MM-HH:MM: write it as 02:00-05:00 (22:00-02:00 runs past midnight)")
            }
            guard start != end else { throw .badRollout("--window '\(text)' starts where it ends, so it is never open: give two different times") }
            self.init(start: start % (24 * 60), end: end % (24 * 60), zone: zone)
        }

        /// Whether the minute of the day `minute` (in ``zone``) is inside.
        public func contains(minute: Int) -> Bool {
            start < end ? (start <= minute && minute < end) : (minute >= start || minute < end)
        }

        /// `02:00-05:00 Europe/Berlin`.
        public var text: String {
            func clock(_ minute: Int) -> String { String(format: "%02d:%02d", minute / 60, minute % 60) }
            return "\(clock(start))-\(clock(end)) \(zone)"
        }
    }

    /// The stages, in order; the last reaches every device. Empty: one stage of every device.
    public var stages: [Stage]
    public var stageWait: StageWait
    /// What the stages' choice of devices is drawn from: the same seed and list, the same stages.
    public var seed: UInt64
    public var halt: HaltRule?
    /// Devices claimed at most in any period, by every worker together (nil: no limit).
    public var rate: ClaimRate?
    /// When devices may be claimed (nil: at any time).
    public var window: ClaimWindow?

    public init(
        stages: [Stage] = [], stageWait: StageWait = .none, seed: UInt64 = 0, halt: HaltRule? = nil, rate: ClaimRate? = nil,
        window: ClaimWindow? = nil
    ) {
        self.stages = stages
        self.stageWait = stageWait
        self.seed = seed
        self.halt = halt
        self.rate = rate
        self.window = window
    }

    /// How many devices may be claimed in any one period (a minute or an hour), by every worker
    /// together: the tries begun in the period just past are counted, so the limit holds however
    /// many hosts claim.
    public struct ClaimRate: Sendable, Codable, Equatable {
        public var count: Int
        /// 60 or 3600.
        public var periodSeconds: Int

        public init(count: Int, periodSeconds: Int) {
            self.count = count
            self.periodSeconds = periodSeconds
        }

        /// `N/min` or `N/h`.
        public init(parsing text: String) throws(CampaignError) {
            let parts = text.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 2, let count = Int(parts[0]), count > 0, let period = ["min": 60, "h": 3600][String(parts[1])] else {
                throw .badRollout("--rate '\(text)' is not a number of devices per minute or hour: write it as 20/min or 100/h")
            }
            self.init(count: count, periodSeconds: period)
        }

        public var text: String { "\(count)/\(periodSeconds == 3600 ? "h" : "min")" }
    }

    /// Stages as the database keeps them: at least one (everything, when none was given).
    public var effectiveStages: [Stage] { stages.isEmpty ? [Stage(name: "all", reach: .percent(100))] : stages }

    /// Checks the stages against a list of `total` devices: the last must reach every device,
    /// since a device in no stage would never be offered.
    public func check(deviceCount total: Int) throws(CampaignError) {
        guard let last = stages.last else { return }
        let reached = reach(ofStage: stages.count - 1, total: total)
        guard reached >= total else {
            throw .badRollout(
                "the last --stage (\(last.text)) reaches \(reached) of the \(total) devices: end with --stage 100% so that every device is offered")
        }
        var names = Set<String>()
        for stage in stages where !names.insert(stage.name).inserted {
            throw .badRollout("two stages are named '\(stage.name)': name each once (NAME=SIZE)")
        }
    }

    /// Devices offered once stage `index` is open (cumulative): never fewer than the stage before.
    public func reach(ofStage index: Int, total: Int) -> Int {
        effectiveStages.prefix(index + 1).reduce(0) { max($0, $1.reach(of: total)) }
    }

    /// The stage (0-based) of each device of a list of `total`, by its position in the list: the
    /// list shuffled by ``seed`` (a Fisher–Yates shuffle over SplitMix64, written out so that
    /// it never changes with the Swift library), the first devices of the shuffle in the first
    /// stage, and so on.
    public func stageOfEachDevice(total: Int) -> [Int] {
        guard total > 0 else { return [] }
        var order = Array(0..<total)
        var random = SeededRandom(seed: seed, stream: "campaign-stages")
        if total > 1 {
            for index in stride(from: total - 1, to: 0, by: -1) {
                let other = Int(random.next() % UInt64(index + 1))
                order.swapAt(index, other)
            }
        }
        var stageOf = [Int](repeating: 0, count: total)
        var stage = 0
        for (rank, position) in order.enumerated() {
            while stage < effectiveStages.count - 1, rank >= reach(ofStage: stage, total: total) { stage += 1 }
            stageOf[position] = stage
        }
        return stageOf
    }
}

extension Double {
    /// At most `decimals` decimals, without trailing zeros: 5, 7.5, 33.33.
    func formatted(decimals: Int) -> String {
        var text = String(format: "%.\(decimals)f", self)
        if text.contains(".") {
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text.removeLast() }
        }
        return text
    }
}
