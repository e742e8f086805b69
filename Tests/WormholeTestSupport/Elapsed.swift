/// Durations measured on `ContinuousClock`: tests time their waits and runs on the
/// monotonic clock, as the library's own timeouts do. A step of the wall clock (NTP, an
/// operator, `ClockStepTests`) would end a `Date()`-bounded wait early or stretch it, and
/// make a measured run look shorter or longer than it was.
extension Duration {
    /// The duration in seconds, as a `Double` (for printing and comparing with limits).
    package var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
