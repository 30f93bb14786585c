// What forward mode does with what is not an image (`forward-non-images`). Pure value.

/// Forward mode (absolute-form requests through the proxy): `pass` hands a response the image checks refuse (a status
/// other than 200/203, a Content-Type outside content-types, first bytes that are no image) to the client as the
/// origin sent it, never stored, and passes every method through as reverse mode does; `refuse` answers those 502
/// and the other methods 501. Fetch mode refuses both either way.
public enum ForwardNonImages: String, Sendable, Equatable {
    case pass, refuse
}
