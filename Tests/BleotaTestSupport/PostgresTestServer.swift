import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real PostgreSQL server of this test's own: Debian's binaries (`postgresql`,
/// which scripts/bootstrap installs), a new cluster in a temporary directory,
/// listening only on a Unix socket there, stopped and removed by ``stop()``.
///
/// As root the server runs as the `postgres` user the package creates
/// (PostgreSQL refuses to run as root).
public final class PostgresTestServer: Sendable {
    public let directory: String
    public let port: Int
    let binaries: String
    let asPostgresUser: Bool

    /// `postgresql:///postgres?host=DIR&port=PORT` as user `bleota`, a superuser of this cluster.
    public var url: String { "postgresql://bleota@/postgres?host=\(directory)&port=\(port)" }

    public enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case command(String, String)
        public var description: String {
            switch self {
            case .notInstalled: "no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin: install Debian's postgresql (scripts/bootstrap does)"
            case .command(let command, let output): "\(command) failed: \(output)"
            }
        }
    }

    /// The directory holding initdb and pg_ctl: $BLEOTA_POSTGRES_BIN, else Debian's newest.
    static func findBinaries() -> String? {
        if let given = ProcessInfo.processInfo.environment["BLEOTA_POSTGRES_BIN"] { return given }
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted()
        for version in versions.reversed() {
            let bin = "\(root)/\(version)/bin"
            if FileManager.default.isExecutableFile(atPath: "\(bin)/initdb") { return bin }
        }
        return nil
    }

    public static func start() throws -> PostgresTestServer {
        guard let binaries = findBinaries() else { throw Failure.notInstalled }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bleota-pg-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let server = PostgresTestServer(directory: directory, port: Int.random(in: 40_000...59_999), binaries: binaries, asPostgresUser: getuid() == 0)
        do {
            if server.asPostgresUser { try server.run("/bin/chown", ["postgres", directory]) }
            try server.run("\(binaries)/initdb", ["-D", "\(directory)/data", "-U", "bleota", "--auth=trust", "-E", "UTF8", "--no-sync"], asServerUser: true)
            try server.launch()
        } catch {
            server.stop()
            throw error
        }
        return server
    }

    init(directory: String, port: Int, binaries: String, asPostgresUser: Bool) {
        self.directory = directory
        self.port = port
        self.binaries = binaries
        self.asPostgresUser = asPostgresUser
    }

    /// Stops the server at once, as a crash or a host's reboot would (every connection dropped,
    /// nothing flushed on the way), and starts it again on the same socket and data.
    public func restart() throws {
        try run("\(binaries)/pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "stop"], asServerUser: true)
        try launch()
    }

    /// Starts the cluster in `directory/data` on its socket, and waits until it takes connections.
    func launch() throws {
        try run(
            "\(binaries)/pg_ctl",
            [
                "-D", "\(directory)/data", "-l", "\(directory)/log", "-w", "-t", "60", "start",
                "-o", "-k \(directory) -c listen_addresses= -p \(port) -c fsync=off -c max_connections=60",
            ],
            asServerUser: true)
    }

    /// Stops the server at once and removes its directory.
    public func stop() {
        if FileManager.default.fileExists(atPath: "\(directory)/data/postmaster.pid") {
            try? run("\(binaries)/pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "stop"], asServerUser: true)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs a command to its end with its output appended to `commands.log` (not a pipe: the
    /// server pg_ctl leaves running would hold a pipe open).
    func run(_ executable: String, _ arguments: [String], asServerUser: Bool = false) throws {
        let argv = asServerUser && asPostgresUser ? ["/usr/sbin/runuser", "-u", "postgres", "--", executable] + arguments : [executable] + arguments
        let outputPath = "\(directory)/commands.log"
        let process = try SpawnedProcess(argv, output: outputPath, errors: outputPath)
        guard process.wait(timeout: 120) == 0 else {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            let log = (try? String(contentsOfFile: "\(directory)/log", encoding: .utf8)) ?? ""
            throw Failure.command(argv.joined(separator: " "), text + log)
        }
    }
}

/// A child process started with posix_spawn, its output appended to files, waited for
/// with waitpid. (Foundation's Process missed pg_ctl's exit when waited for from a test's
/// task; pipes would be held open by the servers such commands leave running.)
public final class SpawnedProcess: Sendable {
    public let pid: pid_t

    public struct SpawnError: Error, CustomStringConvertible {
        public var description: String
    }

    public init(_ argv: [String], output: String, errors: String, environment: [String: String] = [:]) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        if errors == output {
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 2, errors, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        }
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { _, given in given }
        let cArguments = argv.map { strdup($0) } + [nil]
        let cEnvironment = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for argument in cArguments { free(argument) }
            for variable in cEnvironment { free(variable) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, nil, cArguments, cEnvironment)
        guard spawned == 0 else { throw SpawnError(description: "\(argv[0]): \(String(cString: strerror(spawned)))") }
        self.pid = pid
    }

    /// The exit status once the process ends (128 + N for signal N), or nil after `timeout` seconds.
    public func wait(timeout: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            var status: Int32 = 0
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                // WIFEXITED / WEXITSTATUS / WTERMSIG by hand: the macros do not import.
                return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
            }
            if result < 0 && errno != EINTR { return -1 }
            if Date() >= deadline { return nil }
            // Real time: a real PostgreSQL process is what is waited for.
            usleep(20_000)
        }
    }

    public func signal(_ number: Int32) { kill(pid, number) }
}
