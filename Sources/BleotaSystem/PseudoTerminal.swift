import BleotaLink
import Glibc

/// A pseudo-terminal pair: the master side for the simulated device, the
/// slave's path for a client (`smpmgr --port /dev/pts/N`).
///
/// The master is non-blocking and in raw mode; wrap it in a ``SerialLineLink``
/// with `isPseudoTerminalMaster: true`, which knows that a slave nobody has open
/// is a client not there yet rather than the end of input.
public struct PseudoTerminal: Sendable {
    public let master: Int32
    public let path: String

    public static func open() throws(LinkError) -> PseudoTerminal {
        // posix_openpt/grantpt/unlockpt/ptsname, spelled with the kernel's ioctls (devpts does the granting).
        let master = Glibc.open("/dev/ptmx", O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)
        guard master >= 0 else { throw .system("cannot create a pseudo-terminal: \(String(cString: strerror(errno)))") }
        var unlock: Int32 = 0
        var number: UInt32 = 0
        guard ioctl(master, 0x4004_5431 /* TIOCSPTLCK */, &unlock) == 0, ioctl(master, 0x8004_5430 /* TIOCGPTN */, &number) == 0 else {
            let message = String(cString: strerror(errno))
            Glibc.close(master)
            throw .system("cannot set up the pseudo-terminal: \(message)")
        }
        let name = "/dev/pts/\(number)"
        var settings = termios()
        if tcgetattr(master, &settings) == 0 {
            cfmakeraw(&settings)
            tcsetattr(master, TCSANOW, &settings)
        }
        return PseudoTerminal(master: master, path: name)
    }
}
