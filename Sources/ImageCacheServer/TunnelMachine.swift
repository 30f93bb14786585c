// A blind tunnel's flow rules as a pure value: byte counts and ends in, actions out (Tunnel.swift does the I/O).
//
// Two flows: `up` (read from the client, written to the upstream) and `down` (the reverse). The rules:
//   - A flow holds at most `limit` bytes read and not yet written: at the limit its source is no longer read, and
//     reading resumes once half has been written (backpressure both ways: a client that does not read stops the
//     upstream being read, and so the upstream's sending, through TCP).
//   - A source's end (FIN) is passed on once its flow has drained: the far side's write half is shut, and the other
//     flow goes on (half-close, as TCP allows; TLS close_notify rides inside the bytes).
//   - Both write halves shut: the tunnel is closed (`closed`). Any read or write error, a reset, the idle timeout
//     or a stalled write closes it at once with its reason.

extension Tunnel {
    struct Machine: Equatable {
        enum Side: Equatable, CaseIterable {
            case client
            case upstream

            var other: Side { self == .client ? .upstream : .client }
        }

        /// The bytes flowing out of one side.
        struct Flow: Equatable {
            /// Read from the source, not yet written to the destination.
            var queued = 0
            var readSuspended = false
            /// The source sent its FIN.
            var readEnded = false
            /// The destination's write half is shut (the FIN passed on).
            var writeShut = false
        }

        enum Action: Equatable {
            case suspendReading(Side)
            case resumeReading(Side)
            /// shutdown(SHUT_WR) on this side: the other side's FIN, passed on.
            case shutdownWrite(Side)
            case close(TunnelReport.End)
        }

        let limit: Int
        private(set) var up = Flow()
        private(set) var down = Flow()
        private(set) var closed = false

        init(limit: Int) {
            self.limit = max(limit, 2)
        }

        /// The flow whose bytes come from `side`.
        func flow(from side: Side) -> Flow { side == .client ? up : down }

        /// Whether `side` may be read now.
        func mayRead(_ side: Side) -> Bool {
            let flow = flow(from: side)
            return !closed && !flow.readSuspended && !flow.readEnded
        }

        /// `count` bytes were read from `side`.
        mutating func received(_ count: Int, from side: Side) -> [Action] {
            guard !closed else { return [] }
            var actions: [Action] = []
            let limit = limit
            update(from: side) { flow in
                flow.queued += count
                if flow.queued >= limit, !flow.readSuspended {
                    flow.readSuspended = true
                    actions.append(.suspendReading(side))
                }
            }
            return actions
        }

        /// `count` bytes were written to `side` (they came from the other side).
        mutating func sent(_ count: Int, to side: Side) -> [Action] {
            guard !closed else { return [] }
            let source = side.other
            var actions: [Action] = []
            let limit = limit
            update(from: source) { flow in
                flow.queued = max(0, flow.queued - count)
                if flow.readSuspended, flow.queued <= limit / 2 {
                    flow.readSuspended = false
                    actions.append(.resumeReading(source))
                }
            }
            return actions + passOnEnd(from: source)
        }

        /// `side` sent its FIN (a read returned 0).
        mutating func readEnded(_ side: Side) -> [Action] {
            guard !closed else { return [] }
            update(from: side) { $0.readEnded = true }
            return passOnEnd(from: side)
        }

        /// A read or write failed on either side, or a side reset.
        mutating func failed() -> [Action] { close(.error) }

        /// No byte moved either way for the idle timeout.
        mutating func idleTimedOut() -> [Action] { close(.idle) }

        /// A side took no bytes for the write timeout.
        mutating func writeTimedOut() -> [Action] { close(.error) }

        /// The daemon is stopping.
        mutating func stop() -> [Action] { close(.shutdown) }

        private mutating func passOnEnd(from source: Side) -> [Action] {
            var actions: [Action] = []
            let limit = limit
            update(from: source) { flow in
                if flow.readEnded, flow.queued == 0, !flow.writeShut {
                    flow.writeShut = true
                    actions.append(.shutdownWrite(source.other))
                }
            }
            if up.writeShut, down.writeShut { actions += close(.closed) }
            return actions
        }

        private mutating func close(_ end: TunnelReport.End) -> [Action] {
            guard !closed else { return [] }
            closed = true
            return [.close(end)]
        }

        private mutating func update(from side: Side, _ body: (inout Flow) -> Void) {
            if side == .client { body(&up) } else { body(&down) }
        }
    }
}
