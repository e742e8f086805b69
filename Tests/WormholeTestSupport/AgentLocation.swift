import Foundation
@_spi(Backend) import Wormhole
@_spi(Backend) import WormholePostgres

/// Where a test's container is, as one argument that the test process and the agent
/// processes it starts both understand: a directory, or `postgres:<container>` for a
/// container in the database at `$WORMHOLE_TEST_POSTGRES_URL`.
package enum AgentLocation {
    package static let postgresPrefix = "postgres:"
    package static let urlVariable = "WORMHOLE_TEST_POSTGRES_URL"

    package static func transiting(_ location: String, configuration: Wormhole.Configuration = .init()) throws -> any WormholeTransiting {
        guard location.hasPrefix(postgresPrefix) else {
            return try FileTransiting(directory: location, configuration: configuration)
        }
        #if Postgres
        guard let url = ProcessInfo.processInfo.environment[urlVariable], !url.isEmpty else {
            throw WormholeError(.invalidConfiguration,
                "\(urlVariable) is not set: the PostgreSQL cases need a server. Run Scripts/test, which starts a throwaway cluster, or set it to postgres://user:password@host:port/database")
        }
        return try PostgresTransiting(url: url, container: String(location.dropFirst(postgresPrefix.count)), configuration: configuration)
        #else
        throw WormholeError(.invalidConfiguration, "this build has no PostgreSQL back end: build with --traits Postgres")
        #endif
    }

    package static func wormhole(_ location: String, configuration: Wormhole.Configuration = .init()) throws -> Wormhole {
        Wormhole(transiting: try transiting(location, configuration: configuration))
    }
}
