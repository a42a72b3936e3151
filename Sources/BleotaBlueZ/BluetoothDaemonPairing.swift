import BleotaLink
import Logging

/// Pairing started on purpose, through bluetoothd: `org.bluez.Device1.Pair`
/// (BlueZ `doc/org.bluez.Device.rst`).
///
/// Elsewhere bleota pairs when a device demands it: the kernel starts the
/// pairing when bleota raises the link's security, and bluetoothd asks bleota's
/// `org.bluez.Agent1`. `Pair` is the other way in, for a device that should be
/// bonded before anything is written to it: bluetoothd connects, runs its own
/// GATT discovery, pairs (asking the same agent, which must be registered,
/// ``PairingService``) and keeps the bond, which `bluetoothctl devices Paired`
/// lists. bluetoothd stays connected afterwards, so a command that follows
/// shares its link (``BluetoothDaemonGATT``) instead of connecting again.
public enum BluetoothDaemonPairing {
    /// How a pairing through bluetoothd ended, when it did not fail.
    public struct Outcome: Sendable, Equatable {
        /// bluetoothd's object for the device.
        public var objectPath: String
        /// The device was bonded already: nothing was done.
        public var alreadyPaired: Bool
    }

    /// Why a pairing through bluetoothd failed: bluetoothd's error name (`org.bluez.Error.AuthenticationFailed`)
    /// and text, or what bleota could not do before asking.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public enum Kind: Sendable, Equatable {
            /// bluetoothd did not see the device advertise.
            case notFound
            /// The device or the person refused, or the keys did not match.
            case authentication
            /// bluetoothd could not connect, or the link dropped.
            case connection
            /// The bus or bluetoothd failed otherwise.
            case daemon
        }
        public var kind: Kind
        public var description: String
    }

    /// Finds `device` through bluetoothd on `adapter` (discovering for at most `discovery` when
    /// bluetoothd does not know it yet) and asks bluetoothd to pair with it. The caller keeps a
    /// pairing agent registered while this runs.
    public static func pair(
        adapter: String, device: BluetoothAddress, discovery: Duration, clock: any BleotaClock, logger: Logger
    ) async throws(Failure)
        -> Outcome
    {
        let bus: SystemBus
        do { bus = try await SystemBus.open() } catch { throw Failure(kind: .daemon, description: error.description) }
        do {
            let outcome = try await pair(bus, adapter: adapter, device: device, discovery: discovery, clock: clock, logger: logger)
            await bus.close()
            return outcome
        } catch {
            await bus.close()
            throw error
        }
    }

    private static func pair(
        _ bus: SystemBus, adapter: String, device: BluetoothAddress, discovery: Duration, clock: any BleotaClock, logger: Logger
    ) async throws(Failure) -> Outcome {
        func known() async throws(Failure) -> BluetoothDaemonGATT.ManagedObject? {
            do { return BluetoothDaemonGATT.deviceObject(try await BluetoothDaemonGATT.objects(bus, interfaces: ["org.bluez.Device1"]), adapter: adapter, device: device) } catch {
                throw Failure(kind: .daemon, description: "cannot ask bluetoothd for its devices: \(error.description)")
            }
        }
        var object = try await known()
        if object == nil {
            logger.info("bluetoothd does not know \(device) yet: discovering on \(adapter) for up to \(discovery)")
            let adapterPath = "/org/bluez/\(adapter)"
            do { bus.release(try await bus.call("org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "StartDiscovery")) } catch {
                throw Failure(kind: .daemon, description: "bluetoothd cannot discover on \(adapter): \(error.description)")
            }
            let deadline = clock.now + discovery
            while object == nil, clock.now < deadline {
                try? await clock.sleep(for: .milliseconds(250))
                object = try await known()
            }
            if let stopped = try? await bus.call("org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "StopDiscovery") {
                bus.release(stopped)
            }
        }
        guard let object else {
            throw Failure(kind: .notFound, description: "bluetoothd did not see \(device) advertise on \(adapter) within \(discovery): check that it advertises (bleota scan)")
        }
        if object.flags["Paired"] == true { return Outcome(objectPath: object.path, alreadyPaired: true) }
        logger.info("asking bluetoothd to pair with \(device) (\(object.path))")
        do {
            bus.release(try await bus.call("org.bluez", path: object.path, interface: "org.bluez.Device1", member: "Pair"))
        } catch {
            throw Failure(kind: kind(of: error.description), description: error.description)
        }
        return Outcome(objectPath: object.path, alreadyPaired: false)
    }

    /// bluetoothd's error names (`src/error.c`) sorted by what the user must do.
    static func kind(of error: String) -> Failure.Kind {
        if error.hasPrefix("org.bluez.Error.AuthenticationFailed") || error.hasPrefix("org.bluez.Error.AuthenticationRejected")
            || error.hasPrefix("org.bluez.Error.AuthenticationCanceled") || error.hasPrefix("org.bluez.Error.AuthenticationTimeout")
        {
            return .authentication
        }
        if error.hasPrefix("org.bluez.Error.ConnectionAttemptFailed") || error.hasPrefix("org.bluez.Error.Failed") || error.hasPrefix("org.bluez.Error.NotReady") {
            return .connection
        }
        return .daemon
    }
}
