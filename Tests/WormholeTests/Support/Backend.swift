import Foundation
import Testing
@_spi(Backend) @testable import Wormhole
@_spi(Backend) @testable import WormholeCore
@_spi(Backend) @testable import WormholeFiles
@_spi(Backend) @testable import WormholePostgres
import WormholeTestSupport

/// A back end the guarantee tests run against: each such test is one case per back end,
/// the same code for both (`@Test(arguments: Backend.all)`).
enum Backend: String, Sendable, CustomTestStringConvertible {
    case file
    case postgres

    var testDescription: String { rawValue }

    /// The back ends of this build: the shared directory always, PostgreSQL when the
    /// package is built with the `Postgres` trait (as `Scripts/test` does).
    static let all: [Backend] = {
        #if Postgres
        [.file, .postgres]
        #else
        [.file]
        #endif
    }()

    /// Whether a pass can be stored after its writer was killed. PostgreSQL runs a
    /// statement that has reached it to its end, and commits it, with its client gone
    /// (`PostgresBackendTests.aPassThatReachedTheServerOutlivesItsKilledWriter`); a file
    /// writer's work ends with its process.
    var passesOutliveKilledWriters: Bool { self == .postgres }

    /// A fresh, empty container on this back end, removed (or left unused) after the test.
    func makeStore() throws -> TestStore {
        switch self {
        case .file:
            let directory = TemporaryDirectory()
            return TestStore(backend: self, location: directory.path, directory: directory)
        case .postgres:
            // A container of its own in the shared test database: the tests do not see
            // each other's messages.
            let container = "test-" + UUID().uuidString.lowercased()
            return TestStore(backend: self, location: AgentLocation.postgresPrefix + container, directory: nil)
        }
    }
}

/// A container on one back end, for one test.
final class TestStore: Sendable {
    let backend: Backend
    /// What an agent process is given to reach the same container (see ``AgentLocation``).
    let location: String
    /// The directory of a file store, removed with the store.
    let directory: TemporaryDirectory?

    init(backend: Backend, location: String, directory: TemporaryDirectory?) {
        self.backend = backend
        self.location = location
        self.directory = directory
    }

    /// A wormhole on this container; another call makes another, independent one (in
    /// PostgreSQL's case, with connections of its own).
    func wormhole(configuration: Wormhole.Configuration = .init()) throws -> Wormhole {
        Wormhole(transiting: try transiting(configuration: configuration))
    }

    /// How many listener claims `identifier` has: live listeners', and dead ones' until
    /// the next compaction (files) or pruning (PostgreSQL) removes them.
    func claims(identifier: String) throws -> Int {
        switch backend {
        case .file:
            // The claims directory exists once anyone has listened: a missing one is an error.
            return try FileManager.default.contentsOfDirectory(atPath: location + "/" + ListenerCursor.claimsDirectory + "/" + identifier).count
        case .postgres:
            #if Postgres
            let transiting = try postgresTransiting()
            defer { transiting.close() }
            return try transiting.claimCount(identifier: identifier)
            #else
            throw WormholeError(.invalidConfiguration, "this build has no PostgreSQL back end")
            #endif
        }
    }

    func transiting(configuration: Wormhole.Configuration = .init()) throws -> any WormholeTransiting {
        try AgentLocation.transiting(location, configuration: configuration)
    }

    #if Postgres
    /// A new PostgreSQL transiting, with connections of its own, on this store's container.
    func postgresTransiting(configuration: Wormhole.Configuration = .init()) throws -> PostgresTransiting {
        try #require(try transiting(configuration: configuration) as? PostgresTransiting)
    }
    #endif
}
