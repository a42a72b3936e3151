import ArgumentParser
import BleotaCodec
import BleotaEngine
import BleotaProtocols
import BleotaSystem
import Foundation

/// Options every command that talks to a device shares.
struct DeviceOptions: ParsableArguments {
    @Option(name: .long, help: "The device: sim://PRESET?key=value (built-in simulator), ble://AA:BB:CC:DD:EE:FF[?type=random], udp://HOST[:PORT], serial:///dev/ttyACM0.")
    var device: DeviceAddress

    @Option(
        name: .customLong("connect-timeout"),
        help:
            "Time to wait for the device to connect and answer, in seconds or with a unit (500ms; 0.1…3600 s, default 10 s); the wait for it to come back after a reboot is this, and at least 30 s (a swap takes time).",
        transform: TimeArgument.parse)
    var connectTime = TimeArgument(seconds: 10)
    var connectTimeout: Double { connectTime.seconds() }

    @Flag(name: .long, help: "No progress output (errors still go to stderr).")
    var quiet = false

    @OptionGroup var pairing: PairingOptions

    func validate() throws {
        _ = try connectTime.checkedSeconds(option: "--connect-timeout", range: 0.1...3600)
    }

    var timeouts: StepTimeouts {
        StepTimeouts(connect: .milliseconds(Int64(connectTimeout * 1000)), reboot: .milliseconds(Int64(max(connectTimeout, 30) * 1000)))
    }
}

extension TransferError {
    /// How each kind of failure exits the process (see ``ExitStatus``). A failure
    /// after which the device was found running the new image unconfirmed, or
    /// could not be reached, exits with its own status: the device changed, or may have.
    var exitStatus: ExitStatus {
        switch outcome {
        case .newImageUnconfirmed?: return .newImageUnconfirmed
        case .unknown?: return .deviceStateUnknown
        default: break
        }
        switch code {
        case .invalidTuning, .unsupported: return .usage
        case .badInput: return .badInput
        case .deviceRefused, .protocolViolation, .confirmFailed, .otherVersion: return .deviceError
        case .verificationFailed: return .verificationFailed
        case .linkLost, .timeout: return .linkLost
        case .pairingFailed: return .pairingFailed
        }
    }

    /// A load failure (a bad image, before any device is involved) is its message alone.
    var commandFailure: CommandFailure {
        CommandFailure(exitStatus, step == .load ? message : description, details: FailureDetails(self), transferError: self)
    }
}
