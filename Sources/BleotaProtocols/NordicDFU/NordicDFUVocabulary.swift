/// The named codes of Nordic's Secure DFU control point (nRF5 SDK 15–17
/// secure bootloader, `nrf_dfu_req_handler.h`): operations, object types,
/// result codes and the extended errors behind result 0x0B. Call sites use
/// these names, never the numbers.
package enum NordicDFUOperation: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case protocolVersion = 0x00
    case create = 0x01
    case setReceiptNotification = 0x02
    case calculateChecksum = 0x03
    case execute = 0x04
    case select = 0x06
    /// Serial transports only: the largest packet the bootloader takes.
    case getSerialMTU = 0x07
    /// Serial transports only: object data (over BLE it goes to the packet characteristic).
    case write = 0x08
    case ping = 0x09
    case hardwareVersion = 0x0A
    case firmwareVersion = 0x0B
    case abort = 0x0C
    /// Prefixes every answer and receipt notification.
    case response = 0x60

    package var description: String {
        switch self {
        case .protocolVersion: "protocol version"
        case .create: "create"
        case .setReceiptNotification: "set receipt notification"
        case .calculateChecksum: "calculate checksum"
        case .execute: "execute"
        case .select: "select"
        case .getSerialMTU: "get serial MTU"
        case .write: "write"
        case .ping: "ping"
        case .hardwareVersion: "hardware version"
        case .firmwareVersion: "firmware version"
        case .abort: "abort"
        case .response: "response"
        }
    }
}

/// The two objects a Secure DFU transfer creates: the init packet (command)
/// and the image, in data objects of at most the size Select reports (4 KiB).
package enum NordicDFUObjectType: UInt8, Sendable, Hashable, CustomStringConvertible {
    case command = 0x01
    case data = 0x02

    package var description: String { self == .command ? "command object" : "data object" }
}

/// A control point answer's result.
package enum NordicDFUResult: UInt8, Sendable, Hashable, CustomStringConvertible {
    case invalidCode = 0x00
    case success = 0x01
    case operationNotSupported = 0x02
    case invalidParameter = 0x03
    case insufficientResources = 0x04
    case invalidObject = 0x05
    case unsupportedType = 0x07
    case operationNotPermitted = 0x08
    case operationFailed = 0x0A
    /// The answer carries a ``NordicDFUExtendedError`` byte.
    case extendedError = 0x0B

    package var description: String {
        switch self {
        case .invalidCode: "invalid operation code"
        case .success: "success"
        case .operationNotSupported: "operation not supported"
        case .invalidParameter: "invalid parameter"
        case .insufficientResources: "insufficient resources"
        case .invalidObject: "invalid object (the init packet is malformed or the data does not fit it)"
        case .unsupportedType: "unsupported object type"
        case .operationNotPermitted: "operation not permitted in the bootloader's state"
        case .operationFailed: "operation failed"
        case .extendedError: "extended error"
        }
    }
}

/// Why the bootloader refused, behind result 0x0B: each says what to do.
package enum NordicDFUExtendedError: UInt8, Sendable, Hashable, CustomStringConvertible {
    case noError = 0x00
    case invalidErrorCode = 0x01
    case wrongCommandFormat = 0x02
    case unknownCommand = 0x03
    case initCommandInvalid = 0x04
    case firmwareVersionFailure = 0x05
    case hardwareVersionFailure = 0x06
    case softDeviceVersionFailure = 0x07
    case signatureMissing = 0x08
    case wrongHashType = 0x09
    case hashFailed = 0x0A
    case wrongSignatureType = 0x0B
    case verificationFailed = 0x0C
    case insufficientSpace = 0x0D

    package var description: String {
        switch self {
        case .noError: "no error"
        case .invalidErrorCode: "the bootloader reported an invalid error code"
        case .wrongCommandFormat: "the init packet is not in the format this bootloader reads: generate the package with the nrfutil matching its SDK"
        case .unknownCommand: "the init packet's command is unknown to this bootloader: generate the package with the nrfutil matching its SDK"
        case .initCommandInvalid: "the init packet is invalid for this update (type or sizes): check the package's parts"
        case .firmwareVersionFailure: "the firmware version is lower than the one installed: raise --application-version when generating, or use a debug package"
        case .hardwareVersionFailure: "the package's hw_version does not match this device: generate it with the device's --hw-version"
        case .softDeviceVersionFailure: "the device's SoftDevice is not in the package's sd_req: add its FWID with --sd-req"
        case .signatureMissing: "the bootloader requires a signed package: sign it with the key the bootloader was built with"
        case .wrongHashType: "the init packet's hash type is not one this bootloader accepts (SHA-256)"
        case .hashFailed: "the bootloader could not compute the image hash"
        case .wrongSignatureType: "the signature type is not one this bootloader accepts (ECDSA P-256)"
        case .verificationFailed: "the image's hash or the init packet's signature did not verify: the package was signed with another key or the image was damaged"
        case .insufficientSpace: "the image does not fit the device's free flash: a smaller image, or an update without dual banking"
        }
    }
}
