import Foundation

/// Where a campaign's PostgreSQL database is, from a libpq-style URL:
/// `postgresql://[user[:password]@][host][:port][/database][?host=/socket/dir&sslmode=…]`.
///
/// A host that starts with `/` (written in the query, or percent-encoded in the
/// authority) is the directory of the server's Unix socket, as libpq reads it.
/// The user defaults to `PGUSER` or the login name, the password to `PGPASSWORD`,
/// the database to the user's name.
public struct CampaignAddress: Sendable, Hashable, CustomStringConvertible {
    public enum Endpoint: Sendable, Hashable {
        case tcp(host: String, port: Int)
        /// The socket file itself: `DIR/.s.PGSQL.PORT`.
        case unixSocket(path: String)
    }

    /// TLS on a TCP connection: off, tried first, or required (libpq's sslmode).
    public enum TLSMode: String, Sendable, Hashable {
        case disable, prefer, require
    }

    public var endpoint: Endpoint
    public var user: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    /// Parses `text`; the error says what is wrong and how to write it.
    public init(parsing text: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(CampaignError) {
        func bad(_ problem: String) -> CampaignError {
            .badAddress("\(problem): write postgresql://USER@HOST:PORT/DATABASE or postgresql:///DATABASE?host=/socket/dir")
        }
        guard text.hasPrefix("postgresql://") || text.hasPrefix("postgres://") else { throw bad("'\(Self.redacted(text))' is not a postgresql:// URL") }
        guard let components = URLComponents(string: text) else { throw bad("'\(Self.redacted(text))' does not parse as a URL") }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] {
            guard let value = item.value else { throw bad("query parameter '\(item.name)' has no value") }
            query[item.name] = value
        }
        for key in query.keys where !["host", "port", "sslmode", "user", "password", "dbname"].contains(key) {
            throw bad("unknown query parameter '\(key)' (known: host, port, sslmode, user, password, dbname)")
        }
        let port: Int
        if let given = query["port"] ?? components.port.map(String.init) {
            guard let number = Int(given), (1...65_535).contains(number) else { throw bad("port '\(given)' is not 1…65535") }
            port = number
        } else {
            port = 5432
        }
        let host = query["host"] ?? components.percentEncodedHost.flatMap { $0.removingPercentEncoding } ?? ""
        if host.hasPrefix("/") {
            endpoint = .unixSocket(path: (host as NSString).appendingPathComponent(".s.PGSQL.\(port)"))
        } else if host.isEmpty {
            endpoint = .unixSocket(path: "/var/run/postgresql/.s.PGSQL.\(port)")
        } else {
            endpoint = .tcp(host: host, port: port)
        }
        let login = environment["USER"] ?? environment["LOGNAME"] ?? "postgres"
        user = query["user"] ?? components.percentEncodedUser.flatMap { $0.removingPercentEncoding } ?? environment["PGUSER"] ?? login
        password = query["password"] ?? components.percentEncodedPassword.flatMap { $0.removingPercentEncoding } ?? environment["PGPASSWORD"]
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = query["dbname"] ?? (path.isEmpty ? user : path)
        guard !database.contains("/") else { throw bad("database name '\(database)' contains '/'") }
        switch query["sslmode"] ?? (host.hasPrefix("/") || host.isEmpty ? "disable" : "prefer") {
        case "disable", "allow": tls = .disable
        case "prefer": tls = .prefer
        case "require", "verify-ca", "verify-full": tls = .require
        case let other: throw bad("sslmode '\(other)' is not one of disable, prefer, require")
        }
    }

    /// The address for messages: never the password.
    public var description: String {
        let place: String
        switch endpoint {
        case .tcp(let host, let port): place = "\(host):\(port)"
        case .unixSocket(let path): place = path
        }
        return "postgresql://\(user)@\(place)/\(database)"
    }

    /// `text` with any password replaced by `***`, for an error about a URL that does not parse.
    static func redacted(_ text: String) -> String {
        guard let at = text.firstIndex(of: "@"), let scheme = text.range(of: "://"), scheme.upperBound < at else { return text }
        let credentials = text[scheme.upperBound..<at]
        guard let colon = credentials.firstIndex(of: ":") else { return text }
        return String(text[..<colon]) + ":***" + String(text[at...])
    }
}
