import Testing
@testable import ImageCacheTransform

@Suite("ResizePlan: the geometry of a transform, without pixels", .timeLimit(.minutes(1)))
struct ResizePlanTests {
    private func plan(_ width: Int, _ height: Int, _ options: String) throws -> ResizePlan {
        ResizePlan.make(width: width, height: height, options: try parseOptions(options))
    }

    private typealias Window = ResizePlan.Window
    private typealias Canvas = ResizePlan.Canvas

    // MARK: - Resizing types

    @Test("fit scales to fit inside the box, keeping the aspect ratio, with no window or canvas")
    func fit() throws {
        let wide = try plan(1000, 500, "rs:fit:300:300")
        #expect(wide == ResizePlan(scaledWidth: 300, scaledHeight: 150, window: nil, canvas: nil))
        let tall = try plan(500, 1000, "rs:fit:300:300")
        #expect(tall.scaledWidth == 150 && tall.scaledHeight == 300)
        #expect(tall.resultWidth == 150 && tall.resultHeight == 300)
    }

    @Test("fill covers the box and cuts a box-sized window at the centre")
    func fill() throws {
        // When: 1000x500 -> 600x300 covers 300x300
        let filled = try plan(1000, 500, "rs:fill:300:300")
        // Then
        #expect(filled.scaledWidth == 600 && filled.scaledHeight == 300)
        #expect(filled.window == Window(left: 150, top: 0, width: 300, height: 300, smart: false))
        #expect(filled.resultWidth == 300 && filled.resultHeight == 300)
        // A portrait source: 500x1000 -> 300x600, the window in the middle vertically.
        #expect(try plan(500, 1000, "rs:fill:300:300").window == Window(left: 0, top: 150, width: 300, height: 300, smart: false))
    }

    @Test("fill's window follows the gravity; sm marks it smart")
    func fillGravity() throws {
        #expect(try plan(1000, 500, "rs:fill:300:300/g:we").window?.left == 0)
        #expect(try plan(1000, 500, "rs:fill:300:300/g:ea").window?.left == 300)
        #expect(try plan(1000, 500, "rs:fill:300:300/g:fp:0.9:0.5").window?.left == 300)  // 540 - 150 = 390, clamped
        #expect(try plan(1000, 500, "rs:fill:300:300/g:fp:0.4:0.5").window?.left == 90)  // 240 - 150
        #expect(try plan(500, 1000, "rs:fill:300:300/g:so").window?.top == 300)
        #expect(try plan(1000, 500, "rs:fill:300:300/g:sm").window == Window(left: 150, top: 0, width: 300, height: 300, smart: true))
    }

    @Test("fill on a source smaller than the box (no enlarge) keeps the source, cut only where it overflows")
    func fillSmallSource() throws {
        #expect(try plan(200, 100, "rs:fill:400:400") == ResizePlan(scaledWidth: 200, scaledHeight: 100, window: nil, canvas: nil))
        #expect(try plan(400, 100, "rs:fill:300:200").window == Window(left: 50, top: 0, width: 300, height: 100, smart: false))
    }

    @Test("fill-down on a small source keeps the box's aspect ratio at the largest size the source holds, never enlarging")
    func fillDown() throws {
        // 200x100 source, 400x400 box: the largest square in it is 100x100, in the centre.
        let square = try plan(200, 100, "rs:fill-down:400:400")
        #expect(square.scaledWidth == 200 && square.scaledHeight == 100)
        #expect(square.window == Window(left: 50, top: 0, width: 100, height: 100, smart: false))
        // 400x100 source, 300x200 box (3:2): 150x100.
        #expect(try plan(400, 100, "rs:fill-down:300:200").window == Window(left: 125, top: 0, width: 150, height: 100, smart: false))
        // 100x400 source, 300x200 box (3:2): 100x67.
        #expect(try plan(100, 400, "rs:fill-down:300:200").window == Window(left: 0, top: 167, width: 100, height: 67, smart: false))
        // A source larger than the box: as fill.
        #expect(try plan(1000, 500, "rs:fill-down:300:300") == plan(1000, 500, "rs:fill:300:300"))
    }

    @Test("force scales width and height separately to the box; a 0 follows the other by the aspect ratio")
    func force() throws {
        #expect(try plan(1000, 500, "rs:force:300:300") == ResizePlan(scaledWidth: 300, scaledHeight: 300, window: nil, canvas: nil))
        #expect(try plan(1000, 500, "rs:force:300:0") == ResizePlan(scaledWidth: 300, scaledHeight: 150, window: nil, canvas: nil))
        #expect(try plan(1000, 500, "rs:force:0:100") == ResizePlan(scaledWidth: 200, scaledHeight: 100, window: nil, canvas: nil))
        // Without enlarge each side is capped at the source's.
        #expect(try plan(100, 100, "rs:force:200:50") == ResizePlan(scaledWidth: 100, scaledHeight: 50, window: nil, canvas: nil))
        #expect(try plan(100, 100, "rs:force:200:50:1") == ResizePlan(scaledWidth: 200, scaledHeight: 50, window: nil, canvas: nil))
    }

    @Test("auto fills when source and box have one orientation, else fits", arguments: [
        // source, box, expected plan as the explicit type
        (1000, 500, "300:200", "fill"),
        (500, 1000, "200:300", "fill"),
        (1000, 500, "200:300", "fit"),
        (500, 1000, "300:200", "fit"),
        (1000, 500, "300:0", "fill"),
    ])
    func auto(width: Int, height: Int, box: String, type: String) throws {
        #expect(try plan(width, height, "rs:auto:\(box)") == plan(width, height, "rs:\(type):\(box)"))
        // and the two types differ for these boxes, so the rule is what chose
        if !box.hasSuffix(":0") {
            #expect(try plan(width, height, "rs:fill:\(box)") != plan(width, height, "rs:fit:\(box)"))
        }
    }

    @Test("enlarge off (the default) caps the scale at 1; on, the source is scaled up")
    func enlarge() throws {
        #expect(try plan(100, 50, "rs:fit:400:400").scaledWidth == 100)
        #expect(try plan(100, 50, "rs:fit:400:400:1") == ResizePlan(scaledWidth: 400, scaledHeight: 200, window: nil, canvas: nil))
        #expect(try plan(100, 50, "rs:fill:400:400:1").window == Window(left: 200, top: 0, width: 400, height: 400, smart: false))
    }

    @Test("width or height 0 follows the other by the aspect ratio; both 0 is no resize", arguments: [
        ("rs:fit:300:0", 300, 150), ("rs:fit:0:100", 200, 100), ("rs:fill:300:0", 300, 150), ("rs:fill:0:100", 200, 100),
        ("w:250", 250, 125), ("h:50", 100, 50), ("rs:fit:0:0", 1000, 500), ("", 1000, 500),
    ])
    func zeroFollows(options: String, width: Int, height: Int) throws {
        let result = try plan(1000, 500, options)
        #expect(result == ResizePlan(scaledWidth: width, scaledHeight: height, window: nil, canvas: nil))
    }

    @Test("dpr scales the box")
    func dpr() throws {
        #expect(try plan(1000, 500, "w:150/h:100/rt:fill/dpr:2") == plan(1000, 500, "rs:fill:300:200"))
    }

    @Test("every dimension is at least 1 pixel")
    func atLeastOnePixel() throws {
        #expect(try plan(10000, 1, "rs:fit:100:100") == ResizePlan(scaledWidth: 100, scaledHeight: 1, window: nil, canvas: nil))
        #expect(try plan(0, 0, "rs:fit:100:100").scaledWidth >= 1)
    }

    // MARK: - Extend

    @Test("extend puts a smaller result on a box-sized canvas, centred by default")
    func extendCanvas() throws {
        let wide = try plan(1000, 500, "rs:fit:300:300:0:1")
        #expect(wide.scaledWidth == 300 && wide.scaledHeight == 150)
        #expect(wide.canvas == Canvas(width: 300, height: 300, x: 0, y: 75))
        #expect(wide.resultWidth == 300 && wide.resultHeight == 300)
        // A small source, never enlarged, in the middle of the canvas.
        #expect(try plan(100, 100, "rs:fit:300:200:0:1").canvas == Canvas(width: 300, height: 200, x: 100, y: 50))
        // Without extend, no canvas.
        #expect(try plan(100, 100, "rs:fit:300:200").canvas == nil)
        // A result as large as the box needs none.
        #expect(try plan(1000, 500, "rs:fill:300:300:0:1").canvas == nil)
        // Extend with one side 0: that side is the result's.
        #expect(try plan(100, 100, "rs:fit:300:0:0:1").canvas == Canvas(width: 300, height: 100, x: 100, y: 0))
    }

    @Test("extend's gravity places the result on the canvas", arguments: [
        ("ex:1:nowe", 0, 0), ("ex:1:no", 100, 0), ("ex:1:noea", 200, 0), ("ex:1:we", 0, 50), ("ex:1:ce", 100, 50),
        ("ex:1:ea", 200, 50), ("ex:1:sowe", 0, 100), ("ex:1:so", 100, 100), ("ex:1:soea", 200, 100),
        ("ex:1:we:10:5", 10, 55), ("ex:1:fp:0:0", 0, 0),
    ])
    func extendGravity(option: String, x: Int, y: Int) throws {
        let result = try plan(100, 100, "rs:fit:300:200/\(option)")
        #expect(result.canvas == Canvas(width: 300, height: 200, x: x, y: y))
    }

    @Test("the request's gravity does not move the canvas, only extend's does")
    func extendIgnoresRequestGravity() throws {
        #expect(try plan(100, 100, "rs:fit:300:200:0:1/g:nowe").canvas == Canvas(width: 300, height: 200, x: 100, y: 50))
    }

    // MARK: - Placement

    @Test("place: a 100x50 window in a 300x250 area at each compass point", arguments: [
        (-1, -1, 0, 0), (0, -1, 100, 0), (1, -1, 200, 0),
        (-1, 0, 0, 100), (0, 0, 100, 100), (1, 0, 200, 100),
        (-1, 1, 0, 200), (0, 1, 100, 200), (1, 1, 200, 200),
    ])
    func placeCompass(x: Int, y: Int, left: Int, top: Int) {
        let placed = ResizePlan.place(100, 50, in: 300, 250, gravity: .compass(x: x, y: y, offsetX: 0, offsetY: 0))
        #expect(placed == (left, top))
    }

    @Test("place: offsets move inward from the named edge and are clamped inside the area", arguments: [
        (Gravity.compass(x: -1, y: -1, offsetX: 10, offsetY: 5), 10, 5),
        (.compass(x: 1, y: 1, offsetX: 10, offsetY: 5), 190, 195),
        (.compass(x: 0, y: 0, offsetX: 10, offsetY: -5), 110, 95),
        (.compass(x: -1, y: -1, offsetX: -50, offsetY: -50), 0, 0),
        (.compass(x: 1, y: 1, offsetX: 500, offsetY: 500), 0, 0),
        (.compass(x: -1, y: -1, offsetX: 500, offsetY: 500), 200, 200),
    ])
    func placeOffsets(gravity: Gravity, left: Int, top: Int) {
        #expect(ResizePlan.place(100, 50, in: 300, 250, gravity: gravity) == (left, top))
    }

    @Test("place: a focus point centres the window on it, clamped; smart gives the centre until pixels are read", arguments: [
        (Gravity.focus(x: 0.5, y: 0.5), 100, 100),
        (.focus(x: 0.25, y: 0.2), 25, 25),
        (.focus(x: 0, y: 0), 0, 0),
        (.focus(x: 1, y: 1), 200, 200),
        (.smart, 100, 100),
    ])
    func placeFocus(gravity: Gravity, left: Int, top: Int) {
        #expect(ResizePlan.place(100, 50, in: 300, 250, gravity: gravity) == (left, top))
    }

    @Test("place: a window as large as the area sits at 0,0 whatever the gravity")
    func placeNoSpare() {
        #expect(ResizePlan.place(300, 250, in: 300, 250, gravity: .compass(x: 1, y: 1, offsetX: 10, offsetY: 10)) == (0, 0))
        #expect(ResizePlan.place(400, 300, in: 300, 250, gravity: .focus(x: 1, y: 1)) == (0, 0))
    }
}
