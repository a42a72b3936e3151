/// `bleota image info --json`'s document for a plain image, as a reader of it decodes it:
/// its own declaration, so a change to the printing type that changes the document fails here.
struct ImageInfoDocument: Decodable, Equatable {
    struct Segment: Decodable, Equatable {
        var address: UInt32
        var length: Int
    }
    struct MCUboot: Decodable, Equatable {
        struct TLV: Decodable, Equatable {
            var type: UInt16
            var name: String
            var length: Int
            var protected: Bool
        }
        var version: String
        var headerSize: Int
        var imageSize: Int
        var loadAddress: UInt32
        var flags: UInt32
        var tlvs: [TLV]
        var hash: String?
        var hashValid: Bool
        var keyHash: String?
        var signature: String?
        var signatureVerified: Bool?
        var problem: String?
    }
    var file: String
    var format: String
    var segments: [Segment]
    var baseAddress: UInt32
    var size: Int
    var startAddress: UInt32?
    var header: String?
    var fill: UInt8
    var crc32: String
    var sha256: String
    var `protocol`: String?
    var madeFor: String?
    var mcuboot: MCUboot?
    var error: String?
    var exitStatus: Int32?
}
