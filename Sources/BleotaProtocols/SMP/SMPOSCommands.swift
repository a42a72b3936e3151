import BleotaCodec

/// OS group, command 0: the device echoes `d` back as `r`.
public struct SMPEchoRequest: SMPRequest, Hashable {
    public typealias Response = SMPEchoResponse
    public static let command = SMPCommand.echo
    public static let operation = SMPHeader.Operation.write
    public var text: String
    public init(text: String) { self.text = text }
    public var what: String { "echo" }
    public var body: CBOR { .textMap(["d": .text(text)]) }
    public init(body: CBOR) throws(SMPBody.FieldError) { text = try SMPBody.text(body, "d", in: "the echo request") }
}

public struct SMPEchoResponse: SMPResponse, Hashable {
    public var text: String
    public init(text: String) { self.text = text }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        guard let text = body["r"]?.string else { throw SMPBody.FieldError("the echo answer lacks a text 'r'") }
        self.text = text
    }
    public var body: CBOR { .textMap(["r": .text(text)]) }
}

/// OS group, command 5: reset. Zephyr reads only an optional `force`; it
/// resets whatever else the body holds.
public struct SMPResetRequest: SMPRequest, Hashable {
    public typealias Response = SMPEmptyResponse
    public static let command = SMPCommand.reset
    public static let operation = SMPHeader.Operation.write
    public var force: Bool?
    /// Where the device should boot next (Zephyr 4.2's `CONFIG_MCUMGR_GRP_OS_RESET_BOOT_MODE`,
    /// kept in retention RAM): 1 asks MCUboot for the firmware loader (``bootLoaderMode``); nil
    /// for an ordinary reset.
    public var bootMode: Int?
    public init(force: Bool? = nil, bootMode: Int? = nil) {
        self.force = force
        self.bootMode = bootMode
    }
    /// `boot_mode` 1: the firmware loader (Zephyr's `BOOT_MODE_TYPE_BOOTLOADER`).
    public static let bootLoaderMode = 1
    public var what: String { bootMode == nil ? "the reset request" : "the reset request (boot mode \(bootMode!))" }
    public var body: CBOR { SMPBody.map([("force", force.map(CBOR.bool)), ("boot_mode", bootMode.map { CBOR($0) })]) }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        force = try SMPBody.optionalBool(body, "force", in: "the reset request")
        bootMode = try SMPBody.optionalInt(body, "boot_mode", in: "the reset request")
    }
}

/// OS group, command 6: the device's SMP buffer size and count.
public struct SMPParametersRequest: SMPRequest, Hashable {
    public typealias Response = MCUmgrParameters
    public static let command = SMPCommand.parameters
    public static let operation = SMPHeader.Operation.read
    public init() {}
    public var what: String { "the MCUmgr parameters request" }
    public var body: CBOR { .map([]) }
}

public struct MCUmgrParameters: SMPResponse, Hashable {
    public var bufferSize: Int
    public var bufferCount: Int

    public init(bufferSize: Int, bufferCount: Int) {
        self.bufferSize = bufferSize
        self.bufferCount = bufferCount
    }

    public var body: CBOR { .textMap(["buf_size": CBOR(bufferSize), "buf_count": CBOR(bufferCount)]) }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        bufferSize = try SMPBody.int(body, "buf_size", in: "the MCUmgr parameters")
        bufferCount = try SMPBody.int(body, "buf_count", in: "the MCUmgr parameters")
        guard bufferSize >= 64, bufferCount >= 1 else {
            throw SMPBody.FieldError("the MCUmgr parameters (buffer \(bufferSize) × \(bufferCount)) are too small to upload with")
        }
    }
}

/// OS group, command 7: application info, `uname`-style; `format` picks the fields.
public struct SMPApplicationInfoRequest: SMPRequest, Hashable {
    public typealias Response = SMPApplicationInfo
    public static let command = SMPCommand.applicationInfo
    public static let operation = SMPHeader.Operation.read
    public var format: String?
    public init(format: String? = nil) { self.format = format }
    public var what: String { "the application info request" }
    public var body: CBOR { SMPBody.map([("format", format.map(CBOR.text))]) }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        format = try SMPBody.optionalText(body, "format", in: "the application info request")
    }
}

public struct SMPApplicationInfo: SMPResponse, Hashable {
    public var output: String
    public init(output: String) { self.output = output }
    public init(body: CBOR) throws(SMPBody.FieldError) { output = try SMPBody.text(body, "output", in: "the application info") }
    public var body: CBOR { .textMap(["output": .text(output)]) }
}

/// OS group, command 8: which bootloader, and with `query: "mode"` its MCUboot mode.
public struct SMPBootloaderInfoRequest: SMPRequest, Hashable {
    public typealias Response = SMPBootloaderInfo
    public static let command = SMPCommand.bootloaderInfo
    public static let operation = SMPHeader.Operation.read
    public var query: String?
    public init(query: String? = nil) { self.query = query }
    public var what: String { query == nil ? "the bootloader info request" : "the bootloader \(query!) request" }
    public var body: CBOR { SMPBody.map([("query", query.map(CBOR.text))]) }
    public init(body: CBOR) throws(SMPBody.FieldError) {
        query = try SMPBody.optionalText(body, "query", in: "the bootloader info request")
    }
}

public struct SMPBootloaderInfo: SMPResponse, Hashable {
    public var bootloader: String?
    /// MCUboot's mode (answer to `query: "mode"`).
    public var mode: Int?
    public var noDowngrade: Bool?

    public init(bootloader: String? = nil, mode: Int? = nil, noDowngrade: Bool? = nil) {
        self.bootloader = bootloader
        self.mode = mode
        self.noDowngrade = noDowngrade
    }

    public init(body: CBOR) throws(SMPBody.FieldError) {
        let what = "the bootloader info"
        bootloader = try SMPBody.optionalText(body, "bootloader", in: what)
        mode = try SMPBody.optionalInt(body, "mode", in: what)
        noDowngrade = try SMPBody.optionalBool(body, "no-downgrade", in: what)
    }

    public var body: CBOR {
        SMPBody.map([
            ("bootloader", bootloader.map(CBOR.text)), ("mode", mode.map { CBOR($0) }),
            ("no-downgrade", noDowngrade.map(CBOR.bool)),
        ])
    }

    /// MCUboot's modes as the bootloader info command numbers them: MCUboot's `enum mcuboot_mode`
    /// (boot/bootutil/include/bootutil/boot_status.h). Zephyr's `os_mgmt` answers -1 for a mode it
    /// does not map (its older releases map neither RAM load nor swap using offset).
    public static func modeName(_ mode: Int) -> String {
        switch mode {
        case -1: "mode unknown to the device's MCUmgr"
        case 0: "single slot"
        case 1: "swap using scratch"
        case 2: "upgrade only (overwrite)"
        case 3: "swap using move"
        case 4: "direct XIP without revert"
        case 5: "direct XIP with revert"
        case 6: "RAM load"
        case 7: "firmware loader"
        case 8: "single slot RAM load"
        case 9: "swap using offset"
        default: "mode \(mode)"
        }
    }
}
