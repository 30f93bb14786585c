// The geometry of a transform, from the source's (oriented) size and the options: what size to scale to, which
// window to keep, what canvas to extend to. Pure; unit-tested without pixels.
//
// RULES (imgproxy's resizing types)
//   A width or height of 0 follows the other by the source's aspect ratio; both 0: no resize.
//   fit        scale = min(W / w, H / h): the result fits inside W x H.
//   fill       scale = max(W / w, H / h), then a W x H window is cut at the gravity.
//   fill-down  as fill, but when the source is smaller than W x H (and enlarge is off) the window keeps the
//              requested aspect ratio at the largest size the scaled source holds.
//   force      W x H exactly, aspect ratio ignored (0 follows the other as above).
//   auto       fill when the source and the box are both landscape or both portrait, else fit.
//   enlarge    off (the default): the scale is at most 1 (an image is never upscaled).
//   extend     the result is placed on a W x H canvas of the background at the extend gravity when smaller.
//   Padding is added after, around the result. Every dimension is at least 1 pixel.

public struct ResizePlan: Sendable, Equatable {
    /// The size the source is scaled to (before the window is cut).
    public var scaledWidth: Int
    public var scaledHeight: Int
    /// The window kept of the scaled image; nil: all of it.
    public var window: Window?
    /// The canvas the result is placed on (extend); nil: none.
    public var canvas: Canvas?

    public struct Window: Sendable, Equatable {
        public var left: Int, top: Int, width: Int, height: Int
        /// Chosen by libvips's attention strategy (left and top are then unknown until pixels are read).
        public var smart: Bool
    }

    public struct Canvas: Sendable, Equatable {
        public var width: Int, height: Int, x: Int, y: Int
    }

    /// The result's size before padding.
    public var resultWidth: Int { canvas?.width ?? window?.width ?? scaledWidth }
    public var resultHeight: Int { canvas?.height ?? window?.height ?? scaledHeight }

    public static func make(width sourceWidth: Int, height sourceHeight: Int, options: TransformOptions) -> ResizePlan {
        let w = Double(max(1, sourceWidth)), h = Double(max(1, sourceHeight))
        let boxW = Double(options.targetWidth), boxH = Double(options.targetHeight)
        var type = options.resizeType
        if type == .auto {
            type = (boxW == 0 || boxH == 0 || (w >= h) == (boxW >= boxH)) ? .fill : .fit
        }
        var scaleX = 1.0, scaleY = 1.0
        if boxW > 0 || boxH > 0 {
            switch type {
            case .force:
                scaleX = boxW > 0 ? boxW / w : boxH / h
                scaleY = boxH > 0 ? boxH / h : boxW / w
            case .fill, .fillDown:
                let s = (boxW > 0 && boxH > 0) ? max(boxW / w, boxH / h) : (boxW > 0 ? boxW / w : boxH / h)
                scaleX = s
                scaleY = s
            case .fit, .auto:
                let s = (boxW > 0 && boxH > 0) ? min(boxW / w, boxH / h) : (boxW > 0 ? boxW / w : boxH / h)
                scaleX = s
                scaleY = s
            }
            if !options.enlarge && type != .force {
                let s = min(scaleX, 1)
                scaleX = s
                scaleY = s
            } else if !options.enlarge {
                scaleX = min(scaleX, 1)
                scaleY = min(scaleY, 1)
            }
        }
        let scaledW = max(1, Int((w * scaleX).rounded()))
        let scaledH = max(1, Int((h * scaleY).rounded()))
        var plan = ResizePlan(scaledWidth: scaledW, scaledHeight: scaledH, window: nil, canvas: nil)
        if (type == .fill || type == .fillDown), boxW > 0, boxH > 0 {
            var winW = min(Int(boxW), scaledW), winH = min(Int(boxH), scaledH)
            if type == .fillDown, Int(boxW) > scaledW || Int(boxH) > scaledH {
                // The largest window of the requested aspect ratio inside the scaled image.
                let ratio = boxW / boxH
                if Double(scaledW) / Double(scaledH) > ratio {
                    winH = scaledH
                    winW = max(1, min(scaledW, Int((Double(scaledH) * ratio).rounded())))
                } else {
                    winW = scaledW
                    winH = max(1, min(scaledH, Int((Double(scaledW) / ratio).rounded())))
                }
            }
            if winW < scaledW || winH < scaledH {
                let (left, top) = place(winW, winH, in: scaledW, scaledH, gravity: options.gravity)
                plan.window = Window(left: left, top: top, width: winW, height: winH, smart: options.gravity == .smart)
            }
        }
        if options.extend, boxW > 0 || boxH > 0 {
            let canvasW = max(plan.resultWidth, Int(boxW)), canvasH = max(plan.resultHeight, Int(boxH))
            if canvasW > plan.resultWidth || canvasH > plan.resultHeight {
                let (x, y) = place(plan.resultWidth, plan.resultHeight, in: canvasW, canvasH, gravity: options.extendGravity)
                // `place` gives where a window sits inside a larger area: the same placement, seen from the canvas.
                plan.canvas = Canvas(width: canvasW, height: canvasH, x: x, y: y)
            }
        }
        return plan
    }

    /// Where a `width` x `height` window sits inside `areaW` x `areaH` for a gravity (clamped inside the area).
    public static func place(_ width: Int, _ height: Int, in areaW: Int, _ areaH: Int, gravity: Gravity) -> (Int, Int) {
        let spareW = Double(max(0, areaW - width)), spareH = Double(max(0, areaH - height))
        var left: Double, top: Double
        switch gravity {
        case let .compass(x, y, offsetX, offsetY):
            left = spareW * Double(x + 1) / 2 + (x == 1 ? -offsetX : offsetX)
            top = spareH * Double(y + 1) / 2 + (y == 1 ? -offsetY : offsetY)
        case .smart:
            left = spareW / 2
            top = spareH / 2
        case let .focus(fx, fy):
            left = fx * Double(areaW) - Double(width) / 2
            top = fy * Double(areaH) - Double(height) / 2
        }
        return (Int(min(max(0, left), spareW).rounded()), Int(min(max(0, top), spareH).rounded()))
    }
}
