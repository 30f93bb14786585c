import Testing
@testable import ImageCacheUpstream

@Suite("FlowControl: a transfer's delivery window and pause", .timeLimit(.minutes(1)))
struct FlowControlTests {
    @Test("bytes are admitted until the window is full; released below half of it, the waiting handle is resumed once")
    func window() {
        let flow = FlowControl(window: 100)
        #expect(flow.admit(60))
        #expect(flow.admit(60), "one chunk may pass the window")
        #expect(!flow.admit(10), "120 in transit: pause")
        #expect(!flow.release(60), "60 left: not below half, no resume yet")
        #expect(flow.release(20), "40 left, and the handle waits: resume")
        #expect(!flow.release(10), "already resumed once")
        #expect(flow.admit(10))
    }

    @Test("a release while the handle is not waiting asks for no resume")
    func noSpuriousResume() {
        let flow = FlowControl(window: 100)
        #expect(flow.admit(90))
        #expect(!flow.release(90))
    }

    @Test("without a window everything is admitted; the owner's pause holds whatever the window says")
    func ownerPause() {
        let flow = FlowControl()
        #expect(flow.admit(1 << 40))
        flow.setPaused(true)
        #expect(!flow.admit(1))
        #expect(flow.isPausedByOwner)
        flow.setPaused(false)
        #expect(flow.admit(1))
    }
}
