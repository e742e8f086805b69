#if canImport(Glibc)
import Glibc
#endif

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine, so a
/// stamp a sender writes into a message can be compared with the time a listener reads
/// it.
enum Monotonic {
    /// Now, in nanoseconds since an arbitrary point (boot).
    @inline(__always)
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Sleeps until `deadline` (a value of ``now()``); returns at once when it has passed.
    /// The corresponding C function is `clock_nanosleep` with `TIMER_ABSTIME`, so pacing
    /// does not drift by the time each message took.
    static func sleep(until deadline: UInt64) {
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &time, nil) == EINTR {}
    }

    /// Sleeps for `seconds`.
    static func sleep(seconds: Double) {
        sleep(until: now() + UInt64(seconds * 1e9))
    }
}

/// What a process has used so far: CPU time and context switches.
struct ResourceUsage {
    /// User plus system CPU time, in microseconds.
    var cpuMicroseconds: UInt64
    /// Times the process gave up the CPU to wait (each is a wake-up later).
    var voluntarySwitches: UInt64

    /// This process's usage. The corresponding C function is `getrusage`.
    static func current() -> ResourceUsage {
        var usage = rusage()
        getrusage(Int32(RUSAGE_SELF.rawValue), &usage)
        let cpu = UInt64(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000
            + UInt64(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
        return ResourceUsage(cpuMicroseconds: cpu, voluntarySwitches: UInt64(usage.ru_nvcsw))
    }

    /// This process's resident memory now, in KiB: the second field of
    /// `/proc/self/statm`, in pages. (`ru_maxrss` is the peak, which for these processes
    /// is reached while the runtime and Foundation load, and is higher than what they
    /// hold while they pass messages.)
    static func residentKiB() -> UInt64 {
        let fields = (readText("/proc/self/statm") ?? "").split(separator: " ")
        guard fields.count > 1, let pages = UInt64(fields[1]) else { return 0 }
        return pages * UInt64(sysconf(Int32(_SC_PAGESIZE))) / 1024
    }
}

/// Another process's counters, read from `/proc/<pid>/`.
struct ProcessSample {
    /// User plus system CPU time, in clock ticks (`/proc/<pid>/stat` fields 14 and 15).
    var cpuTicks: UInt64
    /// Voluntary plus involuntary context switches of each of its threads, by thread id.
    var switchesOfThread: [String: UInt64]
    /// Resident memory now, in KiB (`VmRSS`).
    var residentKiB: UInt64
    /// Threads.
    var threads: UInt64

    /// Context switches since `earlier`: of the threads alive in both samples, and all
    /// of those started since. (A thread that ended in between takes its count with it.)
    func switches(since earlier: ProcessSample) -> UInt64 {
        switchesOfThread.reduce(0) { total, entry in
            let before = earlier.switchesOfThread[entry.key] ?? 0
            return total + (entry.value >= before ? entry.value - before : 0)
        }
    }

    /// Clock ticks per second, for turning ``cpuTicks`` into time.
    static let ticksPerSecond = UInt64(sysconf(Int32(_SC_CLK_TCK)))

    static func read(_ pid: pid_t) -> ProcessSample? {
        guard let stat = readText("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command name: state is field 3, so utime (14) and stime (15) are at 11, 12.
        guard fields.count > 12, let user = UInt64(fields[11]), let system = UInt64(fields[12]) else { return nil }
        var sample = ProcessSample(cpuTicks: user + system, switchesOfThread: [:], residentKiB: 0, threads: 0)
        // Switches are counted per thread: add them up over /proc/<pid>/task/*.
        for task in directoryEntries("/proc/\(pid)/task") {
            for line in (readText("/proc/\(pid)/task/\(task)/status") ?? "").split(separator: "\n")
            where line.hasPrefix("voluntary_ctxt_switches") || line.hasPrefix("nonvoluntary_ctxt_switches") {
                sample.switchesOfThread[task, default: 0] += UInt64(line.split(separator: "\t").last.map { $0.trimmingSpaces } ?? "") ?? 0
            }
        }
        for line in (readText("/proc/\(pid)/status") ?? "").split(separator: "\n") {
            let value = UInt64(line.split(separator: ":").last.map { $0.trimmingSpaces.split(separator: " ").first.map(String.init) ?? "" } ?? "") ?? 0
            if line.hasPrefix("VmRSS:") { sample.residentKiB = value }
            if line.hasPrefix("Threads:") { sample.threads = value }
        }
        return sample
    }
}

extension Substring {
    var trimmingSpaces: String {
        String(self.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}

/// The whole contents of a small text file, or `nil`.
func readText(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count <= 0 { break }
        bytes.append(contentsOf: chunk[0..<count])
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Names in a directory, without `.` and `..`.
func directoryEntries(_ path: String) -> [String] {
    guard let directory = opendir(path) else { return [] }
    defer { closedir(directory) }
    var names: [String] = []
    while let entry = readdir(directory) {
        let name = withUnsafePointer(to: entry.pointee.d_name) {
            $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}
