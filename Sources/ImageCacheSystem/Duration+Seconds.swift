// A duration as a number of seconds, for metrics and logs.

extension Duration {
    /// This duration in seconds, fractions included.
    package var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
