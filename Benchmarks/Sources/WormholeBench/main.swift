#if canImport(Glibc)
import Glibc
#endif

// WormholeBench: Wormhole's multi-process benchmark.
//
//   WormholeBench run [--quick] [--rounds N] [--filesystems tmpfs,disk] [--sections latency,burst,...]
//                     [--tmpfs-dir D] [--disk-dir D] [--out DIR] [--cli PATH-TO-wormhole] [--installed-cli PATH]
//                     [--postgres-url URL]   (or $WORMHOLE_BENCH_POSTGRES_URL: adds the postgres section)
//                     [--c-bin DIR]          (the C peers: DIR/floor and DIR/dbus_peer, from Benchmarks/C)
//                     [--dbus-address A --dbus-pid P --dbus-config FILE]   (a running bus for D-Bus)
//                     [--redis-port P --redis-pid PID]   (a running redis-server on 127.0.0.1, the queues section)
//
// `run` starts this executable again as child processes in the roles below, one sender
// and one or more listeners per measurement. The roles can be started by hand too (for
// profiling one side: see Docs/Performance.md).
let arguments = Array(CommandLine.arguments.dropFirst())
let role = arguments.first ?? "help"
let rest = arguments.dropFirst()
do {
    let options = try Options(rest)
    let status: Int32
    switch role {
    case "run":
        var suite = try Suite(options)
        try suite.run()
        status = 0
    case "wormhole-listen": status = try WormholeRoles.listen(options)
    case "wormhole-send": status = try WormholeRoles.send(options)
    case "memory-listen": status = try MemoryRoles.listen(options)
    case "memory-send": status = try MemoryRoles.send(options)
    case "stream-send": status = try BaselineRoles.streamSend(options)
    case "stream-receive": status = try BaselineRoles.streamReceive(options)
    case "naive-send": status = try BaselineRoles.naiveSend(options)
    case "naive-listen": status = try BaselineRoles.naiveListen(options)
    case "notify-send": status = try PostgresRoles.notifySend(options)
    case "notify-listen": status = try PostgresRoles.notifyListen(options)
    case "rr-serve": status = try RequestRoles.serve(options)
    case "rr-call": status = try RequestRoles.call(options)
    case "queue-work": status = try RequestRoles.work(options)
    case "clever-coding": status = try CleverRoles.coding(options)
    case "clever-nfc": status = try CleverRoles.nfc(options)
    case "clever-send-once": status = try CleverRoles.sendOnce(options)
    case "clever-nested": status = try CleverRoles.nested(options)
    default:
        print("""
            usage: WormholeBench run [--quick] [--rounds N] [--filesystems tmpfs,disk] [--sections \(Suite.allSections.joined(separator: ","))]
                                     [--tmpfs-dir D] [--disk-dir D] [--out DIR] [--cli PATH] [--installed-cli PATH] [--postgres-url URL]
                                     [--c-bin DIR] [--dbus-address A --dbus-pid P --dbus-config FILE]
                                     [--redis-port P --redis-pid PID]
            roles: wormhole-listen, wormhole-send, memory-listen, memory-send, stream-send, stream-receive, naive-send, naive-listen, notify-send, notify-listen,
                   rr-serve, rr-call, queue-work
            (wormhole-listen and wormhole-send take --dir D, or --postgres URL --container NAME)
            the C peers are programs of their own: floor send|listen --dir D, dbus_peer send|listen|serve|call --address A,
            redis_peer fill|work --port P
            """)
        status = role == "help" || role == "--help" ? 0 : 64
    }
    exit(status)
} catch {
    printError("WormholeBench \(role): \(error)")
    exit(1)
}
