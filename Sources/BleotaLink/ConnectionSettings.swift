/// What a link's connection ended up using, as far as the transport could
/// find out: the radio PHY, the connection interval and what the peer may
/// skip. Reports carry it so a user who asked for the 2M PHY learns whether
/// they got it, and why not when they did not.
public struct ConnectionSettings: Sendable, Codable, Equatable {
    /// "1M", "2M" or "Coded", as the controller reports it; nil when unknown.
    public var phy: String?
    public var intervalMilliseconds: Double?
    public var peripheralLatency: Int?
    public var supervisionTimeoutMilliseconds: Int?
    /// One line per request that could not be met, saying which and why.
    public var notes: [String]

    public init(
        phy: String? = nil, intervalMilliseconds: Double? = nil, peripheralLatency: Int? = nil,
        supervisionTimeoutMilliseconds: Int? = nil, notes: [String] = []
    ) {
        self.phy = phy
        self.intervalMilliseconds = intervalMilliseconds
        self.peripheralLatency = peripheralLatency
        self.supervisionTimeoutMilliseconds = supervisionTimeoutMilliseconds
        self.notes = notes
    }

    /// "PHY 2M, interval 15 ms" or what is known of it.
    public var summary: String {
        var parts: [String] = []
        if let phy { parts.append("PHY \(phy)") }
        if let intervalMilliseconds {
            var text = "interval \(intervalMilliseconds.millisecondsText) ms"
            if let peripheralLatency, peripheralLatency > 0 { text += ", latency \(peripheralLatency)" }
            parts.append(text)
        }
        return parts.joined(separator: ", ")
    }
}

extension Double {
    /// 7.5 → "7.5", 15 → "15": intervals are multiples of 1.25 ms.
    public var millisecondsText: String {
        let hundredths = (self * 100).rounded()
        if hundredths.truncatingRemainder(dividingBy: 100) == 0 { return String(Int(hundredths / 100)) }
        var text = String(hundredths / 100)
        while text.hasSuffix("0") { text.removeLast() }
        return text
    }
}
