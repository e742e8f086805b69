#if canImport(Glibc)
import Glibc
#endif
import Foundation
@_spi(Backend) import Wormhole
import WormholeTestSupport
import Synchronization

/// The agent's `fault` command:
///
///     fault DIR SCENARIO N KIND         one operation on the identifier "walk" with
///                                      the Nth system call faulted (KIND: enospc,
///                                      eio, emfile, eintr, short, exit; N 0: none):
///                                      SCENARIO pass, clear, listen, drain or
///                                      durable (drain and durable wait, 10 s at most, for
///                                      the 3 messages passed once READY exists). Prints "calls C", then "ok ...",
///                                      "error <code>" or, for listeners,
///                                      "received R errors E"
func faultCommand() throws {
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
            try wormhole.respondToRequests(withIdentifier: "ask", as: String.self, onError: onError) { request in
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
}
