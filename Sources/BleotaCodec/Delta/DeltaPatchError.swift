/// Why a delta patch could not be read or applied: the field and the byte offset (in the patch
/// file, or in the decompressed stream after its header) where reading stopped.
public struct DeltaPatchError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// The patch ends before `field` is complete.
        case truncated
        /// `field` holds a value the format does not allow.
        case invalid(String)
        /// Bytes follow the patch's last chunk.
        case trailingData
        /// A format feature this reader does not apply (in-place or hdiffpatch patches, data-format
        /// pre-processing, compressions other than none and heatshrink).
        case unsupported(String)
        /// The base the patch was made for is not the one given (the ESP header's SHA-256).
        case wrongBase(expected: String, got: String)
    }

    public var kind: Kind
    /// The part of the patch being read: "header", "to-size", "diff size", "heatshrink stream", …
    public var field: String
    /// Where: an offset in the patch file, at most its size (the byte being read, or its end).
    public var offset: Int
    /// Where in the decompressed stream after the header, for a compressed patch's body (whose
    /// offsets there run past the file's end: 55 988 in a 1 000-byte patch); nil otherwise.
    public var dataOffset: Int?

    public init(_ kind: Kind, field: String, offset: Int, dataOffset: Int? = nil) {
        self.kind = kind
        self.field = field
        self.offset = offset
        self.dataOffset = dataOffset
    }

    /// "byte 812", or "byte 812 (byte 55988 of its decompressed data)".
    private var location: String { "byte \(offset)" + (dataOffset.map { " (byte \($0) of its decompressed data)" } ?? "") }

    public var description: String {
        switch kind {
        case .truncated: "the patch ends inside its \(field), at \(location): it is truncated"
        case .invalid(let why): "the patch's \(field) at \(location) is invalid: \(why)"
        case .trailingData: "the patch goes on after its last chunk, at \(location): it is damaged or not one patch"
        case .unsupported(let what): "the patch uses \(what) in its \(field) at \(location), which bleota does not apply: make it with compression heatshrink or none, sequential"
        case .wrongBase(let expected, let got):
            "the patch was made for a base with SHA-256 \(expected), but the base given has \(got): give the image the device runs"
        }
    }
}
