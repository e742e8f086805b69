#if Postgres
import Foundation
import NIOSSL
import PostgresNIO
@_spi(Backend) import Wormhole

/// Where the PostgreSQL server is and how to log in: parsed from a URL in libpq's form.
///
/// ```
/// postgres://user:password@db.example.com:5432/appdb?sslmode=require
/// postgres://wormhole@127.0.0.1:5433/wormhole
/// postgres:///wormhole?host=/var/run/postgresql        (a Unix-domain socket)
/// ```
///
/// The user defaults to the login name, the database to the user, the port to 5432, the
/// password to `$PGPASSWORD`. `sslmode` is `disable`, `prefer` (the default: TLS when the
/// server offers it, unverified, as libpq), `require` (TLS, unverified) or `verify-full`
/// (TLS with the certificate and host name verified against the system's roots).
/// `connect_timeout` takes seconds; `application_name` names the connections in the
/// server's `pg_stat_activity`. `synchronous_commit` sets the
/// durability of passes alone (`off`: a pass returns before its commit reaches the disk;
/// Docs/Scaling.md, "Asynchronous commit").
public struct PostgresServer: Sendable, CustomStringConvertible {
    /// The connection settings PostgresNIO uses.
    public var configuration: PostgresConnection.Configuration
    /// The server's `synchronous_commit` for the transactions that store passes and
    /// batches, and for nothing else (durable positions, claims and work queues keep the
    /// server's setting); `nil`, the server's setting.
    ///
    /// `off` returns a pass once its transaction committed in memory, without waiting for
    /// the WAL flush: a pass that returned can be lost if the database server crashes
    /// (not if the client does) within about three times `wal_writer_delay` (200 ms by
    /// default); the database stays consistent, and listeners may have received
    /// messages that are gone after the crash (Docs/Scaling.md, "Asynchronous commit").
    package var synchronousCommit: SynchronousCommit?

    /// PostgreSQL's values of `synchronous_commit` (its documentation, "Write Ahead Log").
    package enum SynchronousCommit: String, Sendable, CaseIterable {
        case on, off, local
        case remoteWrite = "remote_write"
        case remoteApply = "remote_apply"
    }
    /// The URL with its password hidden: what messages and logs show.
    public let description: String

    /// Parses `url`.
    ///
    /// - Throws: `WormholeError.Code.invalidConfiguration` naming what is wrong with it.
    public init(url: String) throws(WormholeError) {
        let shown = Self.redacted(url)
        func invalid(_ why: String) -> WormholeError {
            WormholeError(.invalidConfiguration,
                "PostgreSQL URL '\(shown)' \(why); the form is postgres://user:password@host:port/database?sslmode=prefer")
        }
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased() else {
            throw invalid("is not a URL")
        }
        guard scheme == "postgres" || scheme == "postgresql" else {
            throw invalid("has the scheme '\(scheme)', not postgres:// or postgresql://")
        }
        let parameters = try Self.parameters(of: components, invalid: invalid)
        let environment = ProcessInfo.processInfo.environment
        let user = parameters["user"] ?? components.user.flatMap { $0.isEmpty ? nil : $0 } ?? environment["PGUSER"] ?? Self.loginName()
        guard let user, !user.isEmpty else { throw invalid("names no user, and the login name is unknown") }
        let password = parameters["password"] ?? components.password ?? environment["PGPASSWORD"]
        var path = components.path
        if path.hasPrefix("/") { path.removeFirst() }
        let database = parameters["dbname"] ?? (path.isEmpty ? user : path)
        guard !database.contains("/") else { throw invalid("has a path with more than the database name") }

        var port = components.port ?? 5432
        if let text = parameters["port"] {
            guard let value = Int(text) else { throw invalid("has the port '\(text)', not a number") }
            port = value
        }
        guard (1...65535).contains(port) else { throw invalid("has the port \(port), outside 1...65535") }

        let host = parameters["host"] ?? components.host.flatMap { $0.isEmpty ? nil : $0 }
        if let host, host.hasPrefix("/") {
            // A directory holding the server's socket, as libpq: <dir>/.s.PGSQL.<port>.
            configuration = PostgresConnection.Configuration(
                unixSocketPath: host + "/.s.PGSQL.\(port)", username: user, password: password, database: database)
        } else {
            let tls = try Self.tls(sslmode: parameters["sslmode"] ?? "prefer", shown: shown, invalid: invalid)
            configuration = PostgresConnection.Configuration(
                host: host ?? "localhost", port: port, username: user, password: password, database: database, tls: tls)
        }
        if let text = parameters["connect_timeout"] {
            guard let seconds = Int64(text), seconds > 0 else { throw invalid("has connect_timeout '\(text)', not a positive number of seconds") }
            configuration.options.connectTimeout = .seconds(seconds)
        }
        if let name = parameters["application_name"] {
            // As libpq: the name the server shows for these connections (pg_stat_activity).
            configuration.options.additionalStartupParameters.append(("application_name", name))
        }
        if let value = parameters["synchronous_commit"] {
            guard let setting = SynchronousCommit(rawValue: value) else {
                let values = SynchronousCommit.allCases.map(\.rawValue)
                throw invalid("has synchronous_commit '\(value)', not \(values.dropLast().joined(separator: ", ")) or \(values.last!)")
            }
            synchronousCommit = setting
        }
        description = shown
    }

    /// Settings made in code, shown as `description` in messages.
    public init(configuration: PostgresConnection.Configuration, description: String) {
        self.configuration = configuration
        self.description = description
    }

    /// The query parameters of the URL, each once with a value and each one libpq's
    /// form knows; else the error `invalid` words.
    private static func parameters(of components: URLComponents,
                                   invalid: (String) -> WormholeError) throws(WormholeError) -> [String: String] {
        var parameters: [String: String] = [:]
        for item in components.queryItems ?? [] {
            guard let value = item.value else { throw invalid("has the parameter '\(item.name)' without a value") }
            parameters[item.name] = value
        }
        let known: Set<String> = ["sslmode", "host", "port", "user", "password", "dbname", "connect_timeout", "application_name",
                                  "synchronous_commit"]
        if let unknown = parameters.keys.sorted().first(where: { !known.contains($0) }) {
            throw invalid("has the parameter '\(unknown)', which is not one of \(known.sorted().joined(separator: ", "))")
        }
        return parameters
    }

    /// The TLS of a connection with `sslmode`, as libpq's modes: none, offered and
    /// unverified, required and unverified, or required and verified.
    private static func tls(sslmode: String, shown: String,
                            invalid: (String) -> WormholeError) throws(WormholeError) -> PostgresConnection.Configuration.TLS {
        switch sslmode {
        case "disable":
            return .disable
        case "prefer", "allow":
            return .prefer(try tlsContext(verify: false, shown: shown))
        case "require":
            return .require(try tlsContext(verify: false, shown: shown))
        case "verify-full", "verify-ca":
            return .require(try tlsContext(verify: true, shown: shown))
        case let other:
            throw invalid("has sslmode '\(other)', not disable, prefer, require or verify-full")
        }
    }

    /// `url` with the password replaced by `***`.
    static func redacted(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return "<not a URL>" }
        if components.password != nil { components.password = "***" }
        if let items = components.queryItems {
            components.queryItems = items.map { $0.name == "password" ? URLQueryItem(name: $0.name, value: "***") : $0 }
        }
        return components.string ?? "<not a URL>"
    }

    private static func loginName() -> String? {
        if let name = ProcessInfo.processInfo.environment["USER"], !name.isEmpty { return name }
        guard let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name else { return nil }
        return String(cString: name)
    }

    private static func tlsContext(verify: Bool, shown: String) throws(WormholeError) -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        if !verify { tls.certificateVerification = .none }
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw WormholeError(.invalidConfiguration, "cannot set up TLS for '\(shown)': \(error)")
        }
    }
}
#endif
