import BleotaLink

/// A connector that hands every link it opens to a ``TransferTurn`` (``TransferTurn/adopt(_:)``), so
/// the turn can change the link's interval whichever protocol opened it. The links themselves are
/// returned as they are: protocols that look for a transport's own type still find it.
struct TurnAdoptingConnector: DeviceConnector {
    let connector: any DeviceConnector
    let turn: any TransferTurn

    var description: String { connector.description }

    func connect(for purpose: ConnectPurpose, timeout: Duration) async throws(LinkError) -> any Link {
        let link = try await connector.connect(for: purpose, timeout: timeout)
        turn.adopt(link)
        return link
    }

    func connect(for purpose: ConnectPurpose, timeout: Duration, advertisedName name: String) async throws(LinkError) -> any Link {
        let link = try await connector.connect(for: purpose, timeout: timeout, advertisedName: name)
        turn.adopt(link)
        return link
    }
}
