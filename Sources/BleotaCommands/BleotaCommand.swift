import ArgumentParser

public struct BleotaCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "bleota", abstract: "BLE OTA", version: "0.1.0")
    public init() {}
}
