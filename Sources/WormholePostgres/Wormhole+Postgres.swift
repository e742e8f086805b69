#if Postgres
@_spi(Backend) import Wormhole

extension Wormhole {
    /// A wormhole whose messages live in a PostgreSQL database, for processes on
    /// different machines: `LISTEN`/`NOTIFY` wakes the listeners.
    ///
    /// Processes that name the same group (and optional directory) exchange messages, as
    /// in a shared directory.
    ///
    /// ```swift
    /// let wormhole = try Wormhole(postgresURL: "postgres://app@db.example.com/app",
    ///                             applicationGroupIdentifier: "group.com.example.notes")
    /// ```
    ///
    /// - Parameters:
    ///   - postgresURL: The database, in libpq's URL form:
    ///     `postgres://user:password@host:port/database?sslmode=prefer`.
    ///   - applicationGroupIdentifier: The group every cooperating process names: the
    ///     container inside the database.
    ///   - optionalDirectory: A sub-container of the group, as with a directory.
    ///   - configuration: Retention and size limits.
    ///   - jsonCoding: The JSON form of messages that are neither `Data` nor `String`
    ///     (`WormholeJSONCoding.standard` by default), as for a directory.
    /// - Throws: `WormholeError.Code.invalidConfiguration` for a URL that is not one,
    ///   `WormholeError.Code.databaseError` when the server cannot be reached or refuses.
    public convenience init(
        postgresURL: String,
        applicationGroupIdentifier: String,
        optionalDirectory: String? = nil,
        configuration: Configuration = Configuration(),
        jsonCoding: JSONCoding = .standard
    ) throws(WormholeError) {
        try self.init(postgres: PostgresServer(url: postgresURL), applicationGroupIdentifier: applicationGroupIdentifier,
                      optionalDirectory: optionalDirectory, configuration: configuration, jsonCoding: jsonCoding)
    }

    /// ``init(postgresURL:applicationGroupIdentifier:optionalDirectory:configuration:jsonCoding:)``
    /// with a server made in code: a ``PostgresServer`` whose connection settings
    /// (TLS, timeouts) a URL does not express.
    public convenience init(
        postgres server: PostgresServer,
        applicationGroupIdentifier: String,
        optionalDirectory: String? = nil,
        configuration: Configuration = Configuration(),
        jsonCoding: JSONCoding = .standard
    ) throws(WormholeError) {
        // Checked here to name what is wrong as the file back end does; the transiting
        // checks the container it is given again, whoever calls it.
        try Wormhole.validate(identifier: applicationGroupIdentifier, kind: "application group identifier")
        var container = applicationGroupIdentifier
        if let optionalDirectory, !optionalDirectory.isEmpty {
            try Wormhole.validate(identifier: optionalDirectory, kind: "optional directory")
            container += "/" + optionalDirectory
        }
        self.init(transiting: try PostgresTransiting(server: server, container: container, configuration: configuration),
                  jsonCoding: jsonCoding)
    }
}
#endif
