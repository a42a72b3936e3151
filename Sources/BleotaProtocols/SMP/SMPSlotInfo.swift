import BleotaCodec

extension SMPCommand {
    /// Image group, command 6 (img_mgmt.h `IMG_MGMT_ID_SLOT_INFO`).
    public static let slotInfo = SMPCommand(group: .image, id: 6)
}

/// Image group, command 6 (read): each image's slots and their sizes, which Zephyr answers with
/// `CONFIG_MCUMGR_GRP_IMG_SLOT_INFO` (smp_group_1.rst; older builds answer "not supported"), so a
/// host can refuse an image too large for its slot before sending a byte.
public struct SMPSlotInfoRequest: SMPRequest, Hashable {
    public typealias Response = SMPSlotInfo
    public static let command = SMPCommand.slotInfo
    public static let operation = SMPHeader.Operation.read
    public init() {}
    public var what: String { "the slot info request" }
    public var body: CBOR { .map([]) }
}

/// `{"images": [{"image", "slots": [{"slot", "size", "upload_image_id"?}], "max_image_size"?}]}`.
public struct SMPSlotInfo: SMPResponse, Hashable {
    public struct Slot: Sendable, Hashable {
        public var slot: Int
        /// Bytes the slot holds; nil where the device could not open its flash area (it sends `rc` instead).
        public var size: Int?
        /// The image number an upload to this slot names: only the slot an upload goes to carries it
        /// (every slot, with `CONFIG_MCUMGR_GRP_IMG_DIRECT_UPLOAD`).
        public var uploadImageID: Int?
        public init(slot: Int, size: Int?, uploadImageID: Int? = nil) {
            self.slot = slot
            self.size = size
            self.uploadImageID = uploadImageID
        }
    }

    public struct Image: Sendable, Hashable {
        public var image: Int
        public var slots: [Slot]
        /// The largest image the device takes for this image number, where it knows better than the
        /// slot's size (the slot less MCUboot's trailer).
        public var maximumImageSize: Int?
        public init(image: Int, slots: [Slot], maximumImageSize: Int? = nil) {
            self.image = image
            self.slots = slots
            self.maximumImageSize = maximumImageSize
        }
    }

    public var images: [Image]

    public init(images: [Image]) { self.images = images }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the slot info"
        guard let listed = body["images"]?.elements else { throw SMPBody.FieldError("\(what) lacks an 'images' array") }
        var images: [Image] = []
        for entry in listed {
            guard let slots = entry["slots"]?.elements else { throw SMPBody.FieldError("an image of \(what) lacks a 'slots' array") }
            var parsed: [Slot] = []
            for slot in slots {
                parsed.append(
                    Slot(
                        slot: try SMPBody.int(slot, "slot", in: what), size: try SMPBody.optionalInt(slot, "size", in: what),
                        uploadImageID: try SMPBody.optionalInt(slot, "upload_image_id", in: what)))
            }
            images.append(
                Image(
                    image: try SMPBody.int(entry, "image", in: what), slots: parsed,
                    maximumImageSize: try SMPBody.optionalInt(entry, "max_image_size", in: what)))
        }
        self.images = images
    }

    public var body: CBOR {
        .textMap([
            "images": .array(
                images.map { image in
                    SMPBody.map([
                        ("image", CBOR(image.image)),
                        (
                            "slots",
                            .array(
                                image.slots.map {
                                    SMPBody.map([
                                        ("slot", CBOR($0.slot)), ("size", $0.size.map { CBOR($0) }),
                                        ("upload_image_id", $0.uploadImageID.map { CBOR($0) }),
                                    ])
                                })
                        ),
                        ("max_image_size", image.maximumImageSize.map { CBOR($0) }),
                    ])
                })
        ])
    }

    /// The most bytes an upload for `image` may hold: its `max_image_size`, else the size of the slot
    /// an upload goes to (the one naming an upload image id, else slot 1); nil when the answer does not say.
    public func uploadLimit(image: Int) -> Int? {
        guard let entry = images.first(where: { $0.image == image }) else { return nil }
        if let maximum = entry.maximumImageSize { return maximum }
        let target = entry.slots.first { $0.uploadImageID != nil } ?? entry.slots.first { $0.slot == 1 }
        return target?.size
    }
}
