// A server's circuit breaker. Pure: the fleet thread owns one per server and passes the monotonic time in (seconds).
//
// States and transitions:
//   closed(failures)  -- success -------------------------------> closed(0)
//                     -- failure, failures + 1 < threshold ------> closed(failures + 1)
//                     -- failure, failures + 1 = threshold ------> open(until: now + openSeconds)   [opened]
//                     -- outage ---------------------------------> open(until: now + openSeconds)   [opened]
//   open(until)       -- startProbe, now >= until ---------------> probing                         (one `mn` goes out)
//                     -- failure (an operation sent before) -----> open(until)                     (unchanged)
//                     -- outage ---------------------------------> open(until)                     (unchanged)
//   probing           -- probeSucceeded ------------------------> closed(0)                        [closed]
//                     -- failure or outage ---------------------> open(until: now + openSeconds)   [opened]
// Only `closed` lets operations through: while open or probing its keys are answered unavailable at once, without
// socket work. A success of an operation sent before the breaker opened does not close it: only the probe does.
// A failure is a connection's failure (a missed deadline, a socket or protocol error), counted once per connection
// however many operations were pending on it. An outage is a failure no retry can mend before the next probe: the
// server's name does not resolve (nothing to connect to), so it opens the breaker at once, whatever the count.

package struct FleetBreaker: Sendable, Equatable {
    package enum State: Sendable, Equatable {
        case closed(failures: Int)
        case open(until: Double)
        case probing
    }

    /// What a call changed, for the owner to log, count and schedule (the probe at `until`).
    package enum Transition: Sendable, Equatable {
        case none
        case opened(until: Double)
        case closed
    }

    package private(set) var state = State.closed(failures: 0)
    package var failuresToOpen: Int
    package var openSeconds: Double

    package init(failuresToOpen: Int, openSeconds: Double) {
        self.failuresToOpen = max(1, failuresToOpen)
        self.openSeconds = openSeconds
    }

    package var allowsOperations: Bool {
        if case .closed = state { return true }
        return false
    }

    package var serverState: FleetStats.ServerState {
        switch state {
        case .closed: .up
        case .open: .down
        case .probing: .probing
        }
    }

    package mutating func recordSuccess() {
        if case .closed = state { state = .closed(failures: 0) }
    }

    package mutating func recordFailure(now: Double) -> Transition {
        switch state {
        case let .closed(failures):
            if failures + 1 >= failuresToOpen { return open(now: now) }
            state = .closed(failures: failures + 1)
            return .none
        case .open:
            return .none
        case .probing:
            return open(now: now)
        }
    }

    /// The server cannot be reached at all (its name does not resolve): open now, from closed or probing.
    package mutating func recordOutage(now: Double) -> Transition {
        switch state {
        case .closed, .probing: open(now: now)
        case .open: .none
        }
    }

    /// Lets the one probe out when the open time is over; false otherwise (not open, or not yet).
    package mutating func startProbe(now: Double) -> Bool {
        guard case let .open(until) = state, now >= until else { return false }
        state = .probing
        return true
    }

    package mutating func probeSucceeded() -> Transition {
        guard case .probing = state else { return .none }
        state = .closed(failures: 0)
        return .closed
    }

    private mutating func open(now: Double) -> Transition {
        let until = now + openSeconds
        state = .open(until: until)
        return .opened(until: until)
    }
}
