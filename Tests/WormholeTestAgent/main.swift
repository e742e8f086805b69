// A small program the integration tests start as a real, separate process.
//
// DIR is a directory, or postgres:<container> for the database at
// $WORMHOLE_TEST_POSTGRES_URL (WormholeTestSupport's AgentLocation).
//
//   WormholeTestAgent write  DIR ID COUNT TAG [SIZE]   pass COUNT messages "TAG:i:<padding>"
//   WormholeTestAgent spray  DIR COUNT ID...           pass COUNT messages round-robin over IDs
//   WormholeTestAgent flood  DIR ID TAG STARTED [ACKS] pass messages until killed
//   WormholeTestAgent listen DIR ID COUNT OUT [START]  record COUNT messages to OUT, one
//                                                      "sequence payload" line each; OUT.ready
//                                                      appears once listening has started
//   WormholeTestAgent observe DIR NAME COUNT OUT       count COUNT posts of NAME
//   WormholeTestAgent cycles DIR N                     N listen/cancel cycles; prints
//                                                      "descriptors threads" before and after
//   WormholeTestAgent instances DIR N K                N listen/cancel cycles, then K listeners
//                                                      that each cancel themselves and start the
//                                                      next from their handler (on the reader
//                                                      thread); prints "most left final
//                                                      microseconds": the most inotify instances
//                                                      open at once, those open when the last
//                                                      cancel returned, at the end, and how long
//                                                      the last one took to close
//   WormholeTestAgent drop DIR N                       create N wormholes, pass to 5 identifiers
//                                                      with each, drop them; prints "descriptors
//                                                      before after"
//   WormholeTestAgent probe DIR                        try to listen; print "ok" or
//                                                      "error <code>: <description>"
//   WormholeTestAgent peak DIR ID [PAYLOAD]           read the latest message of ID, then pass
//                                                      PAYLOAD if given; print "<latest> <peak>":
//                                                      the latest's byte count ("none", or
//                                                      "error:<code>"), and VmHWM in kB
//   WormholeTestAgent pace DIR ID COUNT MICROSECONDS TAG   pass COUNT messages, one per interval
//   WormholeTestAgent wakeups DIR N                    a responder, a work-queue member and a
//                                                      listener of one identifier each woken by
//                                                      each of 2,000 requests, then N, then N more;
//                                                      prints "resident <kB after each of the
//                                                      three> heard <requests the listener heard>"
//   WormholeTestAgent relative DIR                     open Wormhole(directory: DIR) as given (a
//                                                      relative DIR is taken from the current
//                                                      directory), pass "x" under n, print the
//                                                      wormhole's directory
//   WormholeTestAgent group GROUP SUB                  open Wormhole(applicationGroupIdentifier:
//                                                      GROUP, optionalDirectory: SUB) where the
//                                                      environment puts containers, print its
//                                                      directory
//   WormholeTestAgent starved DIR N                    listen to s1...sN, then open /dev/null
//                                                      until the descriptor limit; print "full";
//                                                      wait for N retry reports, print "reports K",
//                                                      close the fillers, print each message as
//                                                      it arrives, and "done" after N
//   WormholeTestAgent durable DIR ID NAME OUT          listen as the durable listener NAME (from the
//                                                      history the first time); append "sequence
//                                                      payload" to OUT for each message handled,
//                                                      "lost N" for a gap; exit after "stop"
//   WormholeTestAgent tight DIR LIMIT COUNT           with at most LIMIT descriptors (ulimit -n),
//                                                      pass COUNT messages over 40 identifiers,
//                                                      then open /dev/null; print "passed N
//                                                      failed M spare ok|<errno>"
//   WormholeTestAgent fault DIR SCENARIO N KIND         one operation on the identifier "walk" with
//                                                      the Nth system call faulted (KIND: enospc,
//                                                      eio, emfile, eintr, short, exit; N 0: none):
//                                                      SCENARIO pass, clear, listen, drain or
//                                                      durable (drain and durable wait, 10 s at most, for
//                                                      the 3 messages passed once READY exists). Prints "calls C", then "ok ...",
//                                                      "error <code>" or, for listeners,
//                                                      "received R errors E"
//   WormholeTestAgent worker DIR ID QUEUE OUT [POISON [HANG [MAX [MS]]]]
//                                                      join the work queue QUEUE of ID; append
//                                                      "sequence deliveries payload" to OUT as each
//                                                      message is taken (before it is handled);
//                                                      a payload equal to POISON throws, one equal
//                                                      to HANG never returns; MAX deliveries (3 with
//                                                      a POISON, else 1,000); each job then takes MS
//                                                      milliseconds ('-' for any: none); "lost N"
//                                                      and "error CODE" for reports; OUT.ready once
//                                                      joined; runs until killed
//   WormholeTestAgent respond DIR ID NAME [READY [HANG]]
//                                                      answer each request of ID with "NAME:<request>"
//                                                      (never returning for the request HANG);
//                                                      READY (default NAME.ready in DIR's parent)
//                                                      once serving; runs until killed
//   WormholeTestAgent request DIR ID COUNT TAG OUT S    COUNT requests "TAG:i", one after another, each
//                                                      with a timeout of S seconds; append to OUT
//                                                      "i ok <reply> <ms>" or "i error <code> <ms>"
//   WormholeTestAgent soak-listen DIR ID EXPECTED OUT  check order and uniqueness on the fly
//                                                      (no memory kept per message); write
//                                                      "received duplicates disorder" to OUT
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Wormhole
import WormholeTestSupport
import Synchronization

/// A value that closures on other threads share.
final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<Result>(_ body: (inout Value) -> Result) -> Result { mutex.withLock { body(&$0) } }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("agent: \(message)\n".utf8))
    exit(1)
}

/// A payload that says how long it is, so a torn one is detectable: "TAG:i:LEN:xxxx…".
func payload(tag: String, index: Int, size: Int) -> String {
    let head = "\(tag):\(index):"
    let fill = max(0, size - head.utf8.count - 8)
    return head + String(format: "%07d:", fill) + String(repeating: "x", count: fill)
}

// An agent never outlives the test that started it, even when that test process is
// killed, and never runs longer than five minutes: a watchdog ends it.
let parent = getppid()
let deadline = ContinuousClock.now + .seconds(300)
Thread {
    while getppid() == parent && ContinuousClock.now < deadline { usleep(100_000) }
    _exit(3)
}.start()

/// Appends lines to the file at `path`, one write per line: a kill leaves whole lines only.
func lineAppender(_ path: String) -> @Sendable (String) -> Void {
    let output = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
    guard output >= 0 else { fail("cannot open \(path)") }
    return { line in
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(output, $0.baseAddress, $0.count) }
    }
}

/// Strings appended from any thread.
final class Tally: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func append(_ item: String) { lock.withLock { items.append(item) } }
    var all: [String] { lock.withLock { items } }
    var count: Int { lock.withLock { items.count } }
}

// WORMHOLE_AGENT_UMASK=077: the umask of a service started with UMask=0077.
if let mask = ProcessInfo.processInfo.environment["WORMHOLE_AGENT_UMASK"], let bits = mode_t(mask, radix: 8) { umask(bits) }

let arguments = CommandLine.arguments.dropFirst().map { $0 }
guard let command = arguments.first else { fail("no command") }
func argument(_ index: Int) -> String {
    guard index < arguments.count else { fail("missing argument \(index) for \(command)") }
    return arguments[index]
}

do {
    switch command {
    case "write":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let identifier = argument(2)
        let count = Int(argument(3)) ?? 0
        let tag = argument(4)
        let size = arguments.count > 5 ? Int(argument(5)) ?? 0 : 0
        for index in 1...max(count, 1) where count > 0 {
            try wormhole.passMessage(payload(tag: tag, index: index, size: size), identifier: identifier)
        }

    case "spray":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let count = Int(argument(2)) ?? 0
        let identifiers = Array(arguments.dropFirst(3))
        for index in 0..<count {
            try wormhole.passMessage("m\(index)", identifier: identifiers[index % identifiers.count])
        }

    case "flood":
        // flood DIR ID TAG STARTED [ACKS]: after each pass returns, its index is appended
        // to ACKS, so a test knows which messages were acknowledged before the kill.
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 20
        let wormhole = try AgentLocation.wormhole(argument(1), configuration: configuration)
        let identifier = argument(2)
        let tag = argument(3)
        let acknowledgements: Int32 = arguments.count > 5 ? open(argument(5), O_WRONLY | O_CREAT | O_APPEND, 0o600) : -1
        var index = 1
        while true {
            // Sizes vary so that records straddle pages and the kill lands anywhere.
            try wormhole.passMessage(payload(tag: tag, index: index, size: 40 + (index * 7919) % 9000), identifier: identifier)
            if acknowledgements >= 0 {
                let line = Array("\(index)\n".utf8)
                _ = line.withUnsafeBytes { write(acknowledgements, $0.baseAddress, $0.count) }
            }
            if index == 1 { _ = FileManager.default.createFile(atPath: argument(4), contents: nil) }
            index += 1
        }

    case "listen":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let identifier = argument(2)
        let count = Int(argument(3)) ?? 0
        let output = argument(4)
        let start: Wormhole.StartingPoint = arguments.count > 5 && argument(5) == "history" ? .history : .now
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var lines: [String] = []
        lines.reserveCapacity(count)
        let token = try wormhole.listenForRecords(withIdentifier: identifier, startingFrom: start, onError: { error in
            FileHandle.standardError.write(Data("agent: \(error)\n".utf8))
            lines.append("error \(error.code)")
        }) { record in
            lines.append("\(record.sequence) \(String(decoding: record.payload, as: UTF8.self))")
            if lines.count == count { done.signal() }
        }
        _ = FileManager.default.createFile(atPath: output + ".ready", contents: nil)
        done.wait()
        token.cancel()
        try lines.joined(separator: "\n").appending("\n").write(toFile: output, atomically: true, encoding: .utf8)

    case "starved":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let count = Int(argument(2)) ?? 0
        let say: @Sendable (String) -> Void = { line in FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
        let reports = DispatchSemaphore(value: 0)
        let received = DispatchSemaphore(value: 0)
        var tokens: [ListenerToken] = []
        for index in 1...count {
            tokens.append(try wormhole.listenForRecords(withIdentifier: "s\(index)", onError: { error in
                say("report \(error.description)")
                if error.errno == .tooManyOpenFiles { reports.signal() }
            }) { record in
                say("message \(String(decoding: record.payload, as: UTF8.self))")
                received.signal()
            })
        }
        // A limit just above what is open now, then every descriptor left taken.
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 64
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        limit.rlim_cur = rlim_t(open + 16)
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        // Full means full for a while: a descriptor that the runtime held for a moment
        // during start-up and closed later is taken too.
        var fillers: [Int32] = []
        var quietRounds = 0
        while quietRounds < 5 {
            var added = 0
            while true {
                let fd = Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC)
                if fd < 0 { break }
                fillers.append(fd)
                added += 1
            }
            quietRounds = added == 0 && !fillers.isEmpty ? quietRounds + 1 : 0
            usleep(20_000)
        }
        say("full")
        var reported = 0
        while reported < count, reports.wait(timeout: .now() + 20) == .success { reported += 1 }
        say("reports \(reported)")
        fillers.forEach { _ = close($0) }
        var arrived = 0
        while arrived < count, received.wait(timeout: .now() + 20) == .success { arrived += 1 }
        tokens.forEach { $0.cancel() }
        say(arrived == count ? "done" : "only \(arrived)")

    case "observe":
        let center = try DarwinNotificationCenter(directory: argument(1))
        let count = Int(argument(3)) ?? 0
        let output = argument(4)
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var seen = 0
        let observation = try center.addObserver(forName: argument(2)) { _ in
            seen += 1
            if seen == count { done.signal() }
        }
        _ = FileManager.default.createFile(atPath: output + ".ready", contents: nil)
        done.wait()
        observation.cancel()
        try "\(seen)\n".write(toFile: output, atomically: true, encoding: .utf8)

    case "peak":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let identifier = argument(2)
        var latest: String
        do throws(WormholeError) {
            latest = try wormhole.record(withIdentifier: identifier).map { "\($0.payload.count)" } ?? "none"
        } catch {
            latest = "error:\(error.code)"
        }
        if arguments.count > 3 {
            do throws(WormholeError) {
                try wormhole.passMessage(argument(3), identifier: identifier)
            } catch {
                latest += ",pass-error:\(error.code)"
            }
        }
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
            .flatMap { $0.split(whereSeparator: \.isWhitespace).dropFirst().first } ?? "-1"
        print("\(latest) \(peak)")

    case "cycles":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let cycles = Int(argument(2)) ?? 0
        func descriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }
        func threads() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1 }
        func cycle(_ index: Int) throws {
            let received = DispatchSemaphore(value: 0)
            let token = try wormhole.listenForMessage(withIdentifier: "cycle", as: String.self) { _ in received.signal() }
            if index % 10 == 0 {
                try wormhole.passMessage("m\(index)", identifier: "cycle")
                received.wait()
            }
            token.cancel()
        }
        // Warm up: let Foundation and Dispatch create what they keep for the process.
        for index in 0..<20 { try cycle(index) }
        Thread.sleep(forTimeInterval: 0.5)
        let before = (descriptors(), threads())
        for index in 0..<cycles { try cycle(index) }
        var after = (descriptors(), threads())
        let deadline = ContinuousClock.now + .seconds(5)
        while (after.0 > before.0 || after.1 > before.1) && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.05)
            after = (descriptors(), threads())
        }
        print("\(before.0) \(before.1) \(after.0) \(after.1)")

    case "durable":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let append = lineAppender(argument(4))
        let done = DispatchSemaphore(value: 0)
        func listen() throws(WormholeError) -> ListenerToken {
            try wormhole.listenForRecords(withIdentifier: argument(2), durableName: argument(3), startingFrom: .history, onError: { error in
                if let missed = error.missedMessageCount { append("lost \(missed)") } else { append("error \(error.code)") }
            }) { record in
                let payload = String(decoding: record.payload, as: UTF8.self)
                append("\(record.sequence) \(payload)")
                if payload == "stop" { done.signal() }
            }
        }
        // A database session of a killed predecessor lingers for a moment: wait for it.
        var attempt = 0
        var token: ListenerToken?
        while token == nil {
            switch Result(catching: { () throws(WormholeError) in try listen() }) {
            case .success(let taken):
                token = taken
            case .failure(let error):
                guard error.code == .durableNameInUse && attempt < 200 else { throw error }
                attempt += 1
                usleep(25_000)
            }
        }
        _ = FileManager.default.createFile(atPath: argument(4) + ".ready", contents: nil)
        done.wait()
        token?.cancel()

    case "sidecar":
        // sidecar DIR NAME INBOUND OUTBOUND COUNT OUTFILE RETAIN: a durable listener NAME
        // on INBOUND (lines "sequence payload" to OUTFILE, "lost N" for a gap) that ends
        // on "end", and, once OUTFILE.go exists, COUNT passes "NAME i" to OUTBOUND, with
        // RETAIN messages kept per identifier (so that passes compact).
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = Int(argument(7)) ?? 4
        let wormhole = try AgentLocation.wormhole(argument(1), configuration: configuration)
        let name = argument(2)
        let append = lineAppender(argument(6))
        let done = DispatchSemaphore(value: 0)
        let token = try wormhole.listenForRecords(withIdentifier: argument(3), durableName: name, startingFrom: .history, onError: { error in
            if let missed = error.missedMessageCount { append("lost \(missed)") } else { append("error \(error.code)") }
        }) { record in
            let payload = String(decoding: record.payload, as: UTF8.self)
            if payload == "end" { done.signal() } else { append("\(record.sequence) \(payload)") }
        }
        _ = FileManager.default.createFile(atPath: argument(6) + ".ready", contents: nil)
        // Passing starts once the test says so (the file ARGUMENT6.go): when the other
        // side's durable listener exists too.
        while !FileManager.default.fileExists(atPath: argument(6) + ".go") { usleep(10_000) }
        for index in 1...max(1, Int(argument(5)) ?? 0) {
            try wormhole.passMessage("\(name) \(index)", identifier: argument(4))
            usleep(500)
        }
        if done.wait(timeout: .now() + 120) == .timedOut { fail("no 'end' within 120 s") }
        token.cancel()

    case "instances":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let cycles = Int(argument(2)) ?? 0
        let chained = Int(argument(3)) ?? 0
        /// The inotify instances this process holds: descriptors that are links to
        /// `anon_inode:inotify`.
        @Sendable func instances() -> Int {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return names.count { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == "anon_inode:inotify" }
        }
        let most = Shared(0)
        @Sendable func note() { let now = instances(); most.withLock { $0 = max($0, now) } }
        for _ in 0..<cycles {
            let token = try wormhole.listenForMessage(withIdentifier: "cycle", as: String.self) { _ in }
            note()
            token.cancel()
            note()
        }
        // Each listener runs on the reader thread (it has no queue), cancels itself there,
        // so that nothing is subscribed for a moment, and starts the next one. Passes go
        // through a new wormhole each, which subscribes nothing.
        let handled = DispatchSemaphore(value: 0)
        let current = Shared<ListenerToken?>(nil)
        @Sendable func listen() throws {
            let token = try wormhole.listenForMessage(withIdentifier: "chain", as: Int.self) { _ in
                current.withLock { $0 }?.cancel()
                note()
                try? listen()
                note()
                handled.signal()
            }
            current.withLock { $0 = token }
        }
        if chained > 0 { try listen() }
        for index in 0..<chained {
            try Wormhole(directory: argument(1)).passMessage(index, identifier: "chain")
            handled.wait()
        }
        current.withLock { $0 }?.cancel()
        let cancelled = DispatchTime.now().uptimeNanoseconds
        let left = instances()
        var final = left
        let deadline = ContinuousClock.now + .seconds(5)
        while final > 0 && ContinuousClock.now < deadline {
            usleep(100)
            final = instances()
        }
        let microseconds = (DispatchTime.now().uptimeNanoseconds - cancelled) / 1000
        print("\(most.withLock { $0 }) \(left) \(final) \(microseconds)")

    case "drop":
        let directory = argument(1)
        let count = Int(argument(2)) ?? 0
        func descriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }
        _ = try Wormhole(directory: directory)
        let before = descriptors()
        for round in 0..<count {
            let wormhole = try Wormhole(directory: directory)
            for identifier in 0..<5 { try wormhole.passMessage(round, identifier: "id\(identifier)") }
        }
        // The inotify reader closes its descriptor once its last watch is gone, on its
        // own thread: give it a moment.
        let deadline = ContinuousClock.now + .seconds(5)
        while descriptors() > before && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.02) }
        print("\(before) \(descriptors())")

    case "fault":
        var configuration = Wormhole.Configuration()
        configuration.retainedMessageCount = 2
        let wormhole = try Wormhole(directory: argument(1), configuration: configuration)
        let scenario = argument(2)
        let at = Int(argument(3)) ?? 0
        let fault: SystemCallFaults.Fault
        switch argument(4) {
        case "enospc": fault = .fail(.noSpace)
        case "eio": fault = .fail(.ioError)
        case "emfile": fault = .fail(.tooManyOpenFiles)
        case "eintr": fault = .fail(.interrupted)
        case "short": fault = .shortWrite
        case "exit": fault = .exitAfter
        default: fail("unknown fault \(argument(4))")
        }
        let plan = at > 0 ? SystemCallFaults.Plan(at: at, fault: fault) : nil
        // Whatever happens, one line says how it ended; "calls" first, for the walk.
        func finish(_ outcome: String) {
            let calls = SystemCallFaults.disarm()
            FileHandle.standardError.write(Data("trace \(SystemCallFaults.calls.joined(separator: " "))\n".utf8))
            print("calls \(calls)")
            print(outcome)
        }
        /// A "got" line for what was handled, written at once (one `write`, no buffer): a
        /// process ended by the fault leaves whole lines of what it handled.
        let writeGot: @Sendable (String) -> Void = { handled in
            let line = Array("got \(handled)\n".utf8)
            _ = line.withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
        }
        /// A work-queue member or a responder made by `make`, armed from its start: it is
        /// handed what to call for each message (a "got" line, written at once) and for
        /// each error. Waits until it has handled 3 messages, or 10 s (a fault it reported
        /// does not stop it: it takes again on its timer); then says what the queue
        /// (`queue`, or the identifier's first) still held for it.
        func walkMember(identifier: String, queue: String?,
                        _ make: (_ handled: @escaping @Sendable (String) -> Void,
                                 _ onError: @escaping @Sendable (WormholeError) -> Void) throws(WormholeError) -> WorkQueueMember) {
            let handled = Tally()
            let errors = Tally()
            // When each was handled and each error came, for a queue that still holds
            // something afterwards (seconds since the start).
            let started = ContinuousClock.now
            let timeline = Tally()
            @Sendable func seconds() -> String {
                let elapsed = (ContinuousClock.now - started).components
                return String(format: "%.3f", Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18)
            }
            SystemCallFaults.arm(plan)
            let made = Result { () throws(WormholeError) -> WorkQueueMember in
                try make({ message in
                    handled.append(message)
                    timeline.append("\(message)@\(seconds())")
                    writeGot(message)
                }, { error in
                    errors.append("\(error.code)")
                    timeline.append("error@\(seconds())")
                })
            }
            let member: WorkQueueMember
            switch made {
            case .success(let made): member = made
            case .failure(let error):
                finish("error \(error.code) \(error)")
                return
            }
            _ = FileManager.default.createFile(atPath: argument(1) + "/READY", contents: nil)
            // A fault it reported does not stop it: it takes again on its timer, and handles
            // all three while it lives (up to 10 s: a loaded machine).
            let deadline = ContinuousClock.now + .seconds(10)
            while Set(handled.all).count < 3 && ContinuousClock.now < deadline { usleep(2_000) }
            let calls = SystemCallFaults.disarm()
            FileHandle.standardError.write(Data("trace \(SystemCallFaults.calls.joined(separator: " "))\n".utf8))
            // The last message is acknowledged (a reply passed first) after its handler;
            // one whose reply could not be passed is handed out again first. Up to 10 s: a
            // loaded machine.
            func status() -> WormholeWorkQueueStatus? {
                ((try? wormhole.workQueues(identifier: identifier)) ?? []).first { queue == nil || $0.name == queue }
            }
            // One reading decides, and it waits for nothing pending either: a message given
            // back (its reply could not be passed) is neither in flight nor handled until
            // the member takes it again, a moment later.
            let settled = ContinuousClock.now + .seconds(10)
            var held = status()
            while !(held?.inFlight == 0 && held?.pending == 0) && ContinuousClock.now < settled {
                usleep(2_000)
                held = status()
            }
            let heldAt = seconds()
            member.cancel()
            print("calls \(calls)")
            // The queue's figures when it still holds something, to look into.
            let detail = held?.inFlight == 0 ? "" : " (\(held.map { "\($0)" } ?? "no queue"); handled \(handled.all); timeline \(timeline.all), status at \(heldAt), cancelled at \(seconds()))"
            print("errors \(errors.count) \(errors.all.joined(separator: ",")) inflight \(held?.inFlight ?? -1)\(detail)")
        }
        switch scenario {
        case "pass", "clear", "batch":
            SystemCallFaults.arm(plan)
            do throws(WormholeError) {
                if scenario == "pass" {
                    let sequence = try wormhole.passMessage("f", identifier: "walk")
                    finish("ok \(sequence)")
                } else if scenario == "batch" {
                    let sequences = try wormhole.passMessages(["f1", "f2", "f3"], identifier: "walk")
                    finish("ok \(sequences.lowerBound)")
                } else {
                    try wormhole.clearMessageContents(forIdentifier: "walk")
                    finish("ok")
                }
            } catch {
                finish("error \(error.code) \(error)")
            }
        case "listen", "drain", "durable":
            let received = Tally()
            let errors = Tally()
            let expected = scenario == "listen" ? 2 : 3
            if scenario == "listen" { SystemCallFaults.arm(plan) }
            let token: ListenerToken
            do throws(WormholeError) {
                let onError: @Sendable (WormholeError) -> Void = { errors.append("\($0.code)") }
                let handle: @Sendable (String) -> Void = { message in
                    received.append(message)
                    writeGot(message)
                }
                if scenario == "durable" {
                    token = try wormhole.listenForMessage(withIdentifier: "walk", as: String.self, durableName: "agent",
                                                         onError: onError, listener: handle)
                } else {
                    token = try wormhole.listenForMessage(withIdentifier: "walk", as: String.self,
                                                         startingFrom: scenario == "listen" ? .history : .now,
                                                         onError: onError, listener: handle)
                }
            } catch {
                finish("error \(error.code) \(error)")
                break
            }
            if scenario != "listen" {
                SystemCallFaults.arm(plan)
                _ = FileManager.default.createFile(atPath: argument(1) + "/READY", contents: nil)
            }
            // Every message, or a report: either ends the wait (10 s at most: a loaded machine).
            let deadline = ContinuousClock.now + .seconds(10)
            while received.count < expected && errors.count == 0 && ContinuousClock.now < deadline { usleep(2_000) }
            token.cancel()
            finish("errors \(errors.count) \(errors.all.joined(separator: ","))")
        case "make":
            // Everything a process makes in a container, armed: a log; the claims
            // directories, a claim and a durable position; a work queue's directories,
            // state and member file; a notification file (SharedModeTests).
            SystemCallFaults.arm(plan)
            do throws(WormholeError) {
                _ = try wormhole.passMessage("m", identifier: "walk")
                try wormhole.listenForMessage(withIdentifier: "walk", as: String.self, durableName: "agent",
                                              onError: { _ in }, listener: { _ in }).cancel()
                try wormhole.listenForMessage(withIdentifier: "walk", as: String.self, workQueue: "q", options: WorkQueueOptions(),
                                              onError: { _ in }, listener: { _ in }).cancel()
                try wormhole.notificationCenter?.post("ping")
                finish("ok")
            } catch {
                finish("error \(error.code) \(error)")
            }
        case "request":
            // Three blocking requests to "ask" (answered by the test's responder), armed:
            // the first before the reply log exists. One line per request.
            SystemCallFaults.arm(plan)
            var failures: [String] = []
            for index in 1...3 {
                let line: String
                do throws(WormholeError) {
                    line = try wormhole.request("q\(index)", identifier: "ask", as: String.self, timeout: 5)
                } catch {
                    line = "error:\(error.code)"
                    failures.append("\(error.code) \(error)")
                }
                writeGot(line)
            }
            finish("errors \(failures.count) \(failures.joined(separator: "; "))")
        case "respond":
            // A responder of "ask", armed from its start: its takes, each request's reply
            // pass, and each acknowledgement with the next take.
            walkMember(identifier: "ask", queue: nil) { handled, onError throws(WormholeError) in
                try wormhole.respond(toIdentifier: "ask", as: String.self, onError: onError) { request in
                    handled(request)
                    return "re:\(request)"
                }
            }
        case "queue":
            // A member of the queue "q" of "walk" (made here, after u4), armed from its
            // join: its takes, and each acknowledgement with the next take.
            walkMember(identifier: "walk", queue: "q") { handled, onError throws(WormholeError) in
                let options = WorkQueueOptions(startingFrom: .after(sequence: 4), redeliveryInterval: 0.05, retryDelay: 0)
                return try wormhole.listenForMessage(withIdentifier: "walk", as: String.self, workQueue: "q", options: options,
                                                     onError: onError, listener: handled)
            }
        default:
            fail("unknown scenario \(scenario)")
        }

    case "tight":
        // The limit first: the library sizes its cache of open logs from it.
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        limit.rlim_cur = rlim_t(Int(argument(2)) ?? 16)
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { fail("setrlimit: \(String(cString: strerror(errno)))") }
        let wormhole = try Wormhole(directory: argument(1))
        var passed = 0
        var failed: [String] = []
        for index in 0..<(Int(argument(3)) ?? 0) {
            do throws(WormholeError) {
                try wormhole.passMessage("m\(index)", identifier: "id\(index % 40)")
                passed += 1
            } catch {
                failed.append(error.description)
            }
        }
        let spare = Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC)
        let spareResult = spare >= 0 ? "ok" : String(cString: strerror(errno))
        if spare >= 0 { Glibc.close(spare) }
        print("passed \(passed) failed \(failed.count) spare \(spareResult)")
        if let first = failed.first { FileHandle.standardError.write(Data("first failure: \(first)\n".utf8)) }

    case "probe":
        let wormhole = try AgentLocation.wormhole(argument(1))
        do throws(WormholeError) {
            let token = try wormhole.listenForMessage(withIdentifier: "probe", as: String.self) { _ in }
            token.cancel()
            print("ok")
        } catch {
            print("error \(error.code): \(error)")
        }

    case "relative":
        let wormhole = try Wormhole(directory: argument(1))
        try wormhole.passMessage("x", identifier: "n")
        print(wormhole.directory ?? "none")

    case "group":
        let wormhole = try Wormhole(applicationGroupIdentifier: argument(1), optionalDirectory: argument(2))
        print(wormhole.directory ?? "none")

    case "pace":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let identifier = argument(2)
        let count = Int(argument(3)) ?? 0
        let interval = UInt32(argument(4)) ?? 1000
        let tag = argument(5)
        // With a sixth argument: stop after that many seconds too, then pass
        // "<tag>:end:<count passed>" (what soak-listen waits for).
        let seconds = arguments.count > 6 ? Double(arguments[6]) : nil
        let deadline = seconds.map { ContinuousClock.now + .seconds($0) }
        var passed = 0
        for index in 1...max(count, 1) where count > 0 {
            if let deadline, ContinuousClock.now >= deadline { break }
            try wormhole.passMessage(payload(tag: tag, index: index, size: 64 + index % 512), identifier: identifier)
            passed = index
            usleep(interval)
        }
        if seconds != nil { try wormhole.passMessage("\(tag):end:\(passed)", identifier: identifier) }

    case "worker":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let append = lineAppender(argument(4))
        // [poison] [payload to hang on] [maximum deliveries] [milliseconds each job takes
        // after its line is written]; "-": none
        func optional(_ index: Int) -> String? { arguments.count > index && argument(index) != "-" ? argument(index) : nil }
        let poison = optional(5)
        let hang = optional(6)
        let delay = optional(8).flatMap { UInt32($0) } ?? 0
        struct Poisoned: Error {}
        let maximum = optional(7).flatMap { Int($0) } ?? (poison == nil ? 1_000 : 3)
        // No retry delay: the tests of this worker count losses and repeats, not time
        // (WorkQueueTests and PythonInteropTests test the delays).
        let options = WorkQueueOptions(maximumDeliveries: maximum, redeliveryInterval: 0.05, retryDelay: 0)
        let member = try wormhole.listenForRecords(withIdentifier: argument(2), workQueue: argument(3), options: options, onError: { error in
            if let missed = error.missedMessageCount { append("lost \(missed)") } else { append("error \(error.code) \(error)") }
        }) { record, deliveries in
            let payload = String(decoding: record.payload, as: UTF8.self)
            append("\(record.sequence) \(deliveries) \(payload)")
            if delay > 0 { usleep(delay * 1000) }
            if payload == poison { throw Poisoned() }
            if payload == hang { while true { sleep(60) } }
        }
        _ = FileManager.default.createFile(atPath: argument(4) + ".ready", contents: nil)
        while true { sleep(60) }
        _ = member

    case "respond":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let name = argument(3)
        let hang = arguments.count > 5 ? argument(5) : nil
        let member = try wormhole.respond(toIdentifier: argument(2), as: String.self) { request in
            if request == hang { while true { sleep(60) } }
            return "\(name):\(request)"
        }
        // [ready file]: by default <name>.ready beside the container directory.
        _ = FileManager.default.createFile(atPath: arguments.count > 4 ? argument(4) : argument(1) + "/../" + name + ".ready", contents: nil)
        while true { sleep(60) }
        _ = member

    case "request":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let count = Int(argument(3)) ?? 0, tag = argument(4), timeout = Double(argument(6)) ?? 5
        var lines = ""
        for index in 1...max(1, count) {
            let started = DispatchTime.now().uptimeNanoseconds
            let outcome = Result { () throws(WormholeError) in try wormhole.request("\(tag):\(index)", identifier: argument(2), as: String.self, timeout: timeout) }
            let milliseconds = (DispatchTime.now().uptimeNanoseconds - started) / 1_000_000
            switch outcome {
            case .success(let reply): lines += "\(index) ok \(reply) \(milliseconds)\n"
            case .failure(let error): lines += "\(index) error \(error.code) \(milliseconds) \(error.message)\n"
            }
        }
        try lines.write(toFile: argument(5), atomically: true, encoding: .utf8)

    case "wakeups":
        let wormhole = try AgentLocation.wormhole(argument(1))
        let count = Int(argument(2)) ?? 0
        let responder = try wormhole.respond(toIdentifier: "ask", as: Int.self) { $0 + 1 }
        let member = try wormhole.listenForRecords(withIdentifier: "ask", workQueue: "audit") { _, _ in }
        let heard = Atomic<Int>(0)
        let listener = try wormhole.listenForRecords(withIdentifier: "ask") { _ in heard.add(1, ordering: .relaxed) }
        func ask(_ times: Int) throws {
            for index in 0..<times where try wormhole.request(index, identifier: "ask", as: Int.self, timeout: 10) != index + 1 {
                throw WormholeError(.requestFailed, "wrong reply to \(index)")
            }
        }
        func resident() -> Int {
            let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
            return status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
                .flatMap { Int($0.split(whereSeparator: \.isWhitespace).dropFirst().first ?? "") } ?? -1
        }
        try ask(2_000)
        let first = resident()
        try ask(count)
        let second = resident()
        try ask(count)
        let third = resident()
        // The listener runs on the reader thread too: it has heard the last request once
        // it gets there.
        for _ in 0..<1_000 where heard.load(ordering: .relaxed) < 2_000 + 2 * count { usleep(10_000) }
        print("resident \(first) \(second) \(third) heard \(heard.load(ordering: .relaxed))")
        _ = (responder, member, listener)

    case "quiet-requests":
        // <count> requests to "ask" (answered by another process, with its number plus
        // one), the first before the reply log exists; blocking, or "async" ones. Prints
        // how many times this process's reader thread woke meanwhile.
        let wormhole = try AgentLocation.wormhole(argument(1))
        let count = Int(argument(2)) ?? 1
        let asynchronous = arguments.count > 3 && argument(3) == "async"
        let before = ReaderThreadWakeUps.count
        for index in 0..<count {
            let reply: Int
            if asynchronous {
                // Awaited by a detached task (this code runs on the main actor, which the
                // wait below blocks), this thread waiting for it.
                let done = DispatchSemaphore(value: 0)
                let result = Tally()
                Task.detached {
                    do throws(WormholeError) {
                        result.append(String(try await wormhole.request(index, identifier: "ask", as: Int.self, timeout: 10)))
                    } catch {
                        result.append("error \(error)")
                    }
                    done.signal()
                }
                done.wait()
                guard let answer = result.all.first.flatMap({ Int($0) }) else { fail("request \(index): \(result.all)") }
                reply = answer
            } else {
                reply = try wormhole.request(index, identifier: "ask", as: Int.self, timeout: 10)
            }
            guard reply == index + 1 else { fail("wrong reply \(reply) to \(index)") }
        }
        print("wakeups \(ReaderThreadWakeUps.count - before)")

    case "soak-listen":
        // Listens until each of <writers> timed pace writers passed its "<tag>:end:<n>";
        // writes "<received> <passed> <duplicates> <out of order>", where passed is the
        // sum of the writers' n, to <output>, then goes on listening until <output>.exit
        // exists.
        let wormhole = try AgentLocation.wormhole(argument(1))
        let writers = Int(argument(3)) ?? 0
        let output = argument(4)
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var received = 0, passed = 0, ended = 0, duplicates = 0, disorder = 0
        nonisolated(unsafe) var lastSequence: UInt64 = 0
        nonisolated(unsafe) var lastIndex: [Substring: Int] = [:]
        let token = try wormhole.listenForRecords(withIdentifier: argument(2)) { record in
            if record.sequence <= lastSequence { duplicates += 1 } else if record.sequence != lastSequence + 1 { disorder += 1 }
            lastSequence = max(lastSequence, record.sequence)
            let text = String(decoding: record.payload, as: UTF8.self)
            let parts = text.split(separator: ":", maxSplits: 2)
            if parts.count == 3, parts[1] == "end", let count = Int(parts[2]) {
                if count != lastIndex[parts[0]] ?? 0 { disorder += 1 }
                passed += count
                ended += 1
                if ended == writers { done.signal() }
                return
            }
            if parts.count == 3, let index = Int(parts[1]) {
                if index != (lastIndex[parts[0]] ?? 0) + 1 { disorder += 1 }
                lastIndex[parts[0]] = index
            }
            received += 1
        }
        _ = FileManager.default.createFile(atPath: output + ".ready", contents: nil)
        done.wait()
        try "\(received) \(passed) \(duplicates) \(disorder)\n".write(toFile: output, atomically: true, encoding: .utf8)
        // Still listening until told to go (<output>.exit, or a minute), so that the
        // test can measure this process after the last message.
        let patience = ContinuousClock.now + .seconds(60)
        while !FileManager.default.fileExists(atPath: output + ".exit") && ContinuousClock.now < patience { usleep(20_000) }
        token.cancel()

    default:
        fail("unknown command \(command)")
    }
} catch {
    fail("\(error)")
}
