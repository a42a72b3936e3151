import Testing

@testable import BleotaBlueZ

/// bluetoothd's error names for a failed `Device1.Pair`, sorted by what the user must do.
@Suite struct BluetoothDaemonPairingTests {
    @Test(
        arguments: [
            ("org.bluez.Error.AuthenticationFailed: Authentication Failed", BluetoothDaemonPairing.Failure.Kind.authentication),
            ("org.bluez.Error.AuthenticationRejected: Authentication Rejected", .authentication),
            ("org.bluez.Error.AuthenticationCanceled: Authentication Canceled", .authentication),
            ("org.bluez.Error.AuthenticationTimeout: Authentication Timeout", .authentication),
            ("org.bluez.Error.ConnectionAttemptFailed: Page Timeout", .connection),
            ("org.bluez.Error.Failed: le-connection-abort-by-local", .connection),
            ("org.bluez.Error.AlreadyExists: Already Exists", .daemon),
            ("org.freedesktop.DBus.Error.NoReply: Did not receive a reply", .daemon),
        ] as [(String, BluetoothDaemonPairing.Failure.Kind)])
    func errorNamesAreSortedByWhatToDo(name: String, kind: BluetoothDaemonPairing.Failure.Kind) {
        #expect(BluetoothDaemonPairing.kind(of: name) == kind)
    }
}
