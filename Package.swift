// swift-tools-version: 6.0
//
// bleota: reliable file transfer and OTA/DFU firmware updates to Bluetooth Low
// Energy devices, from Linux. See README.md for the layer diagram; dependencies
// point one way: CLI → protocols → engine → link → codecs → C libraries.
import PackageDescription

let package = Package(
    name: "bleota",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "bleota", targets: ["bleota"]),
        .library(name: "BleotaCodec", targets: ["BleotaCodec"]),
        .library(name: "BleotaLink", targets: ["BleotaLink"]),
        .library(name: "BleotaATT", targets: ["BleotaATT"]),
        .library(name: "BleotaEngine", targets: ["BleotaEngine"]),
        .library(name: "BleotaProtocols", targets: ["BleotaProtocols"]),
        .library(name: "BleotaSimulator", targets: ["BleotaSimulator"]),
        .library(name: "BleotaBlueZ", targets: ["BleotaBlueZ"]),
        .library(name: "BleotaCommands", targets: ["BleotaCommands"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.0"),
    ],
    targets: [
        // C libraries, reached only through their wrapper modules.
        .systemLibrary(
            name: "CZlib", path: "Sources/CZlib", pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(
            name: "CBlueZ", path: "Sources/CBlueZ", pkgConfig: "bluez",
            providers: [.apt(["libbluetooth-dev"])]),
        .target(name: "BleotaZlib", dependencies: ["CZlib"]),

        // Layers, bottom up.
        .target(
            name: "BleotaCodec",
            dependencies: ["BleotaZlib", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "BleotaLink", dependencies: ["BleotaCodec"]),
        .target(name: "BleotaATT", dependencies: ["BleotaLink", "BleotaCodec"]),
        .target(
            name: "BleotaEngine",
            dependencies: ["BleotaLink", "BleotaCodec", .product(name: "Logging", package: "swift-log")]),
        .target(
            name: "BleotaProtocols",
            dependencies: ["BleotaEngine", "BleotaLink", "BleotaCodec", "BleotaZlib",
                           .product(name: "Logging", package: "swift-log")]),
        .target(
            name: "BleotaSimulator",
            dependencies: ["BleotaProtocols", "BleotaEngine", "BleotaLink", "BleotaCodec"]),
        .target(name: "BleotaBlueZ", dependencies: ["CBlueZ", "BleotaLink", "BleotaATT"]),
        .target(
            name: "BleotaCommands",
            dependencies: [
                "BleotaCodec", "BleotaLink", "BleotaEngine", "BleotaProtocols", "BleotaSimulator", "BleotaBlueZ",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .executableTarget(name: "bleota", dependencies: ["BleotaCommands"]),
        // Figures, not tests: `swift run -c release bleota-bench` (see README "Performance").
        .executableTarget(
            name: "bleota-bench", dependencies: ["BleotaCodec", "BleotaLink", "BleotaEngine", "BleotaProtocols", "BleotaSimulator"],
            path: "Benchmarks"),

        .testTarget(name: "BleotaCodecTests", dependencies: ["BleotaCodec", "BleotaZlib", .product(name: "Crypto", package: "swift-crypto")],
                    resources: [.copy("Fixtures")]),
        .testTarget(name: "BleotaATTTests", dependencies: ["BleotaATT", "BleotaLink", "BleotaCodec", "BleotaSimulator", "BleotaProtocols", "BleotaEngine"]),
        .testTarget(name: "BleotaBlueZTests", dependencies: ["BleotaBlueZ", "BleotaATT", "BleotaLink"]),
        .testTarget(name: "BleotaEngineTests", dependencies: ["BleotaEngine", "BleotaLink"]),
        .testTarget(name: "BleotaSimulatorTests", dependencies: ["BleotaSimulator", "BleotaProtocols", "BleotaEngine", "BleotaLink", "BleotaCodec"]),
        .testTarget(name: "BleotaProtocolsTests", dependencies: ["BleotaProtocols", "BleotaEngine", "BleotaCodec", "BleotaLink"],
                    resources: [.copy("Fixtures")]),
        .testTarget(name: "BleotaCommandsTests", dependencies: ["BleotaCommands", "BleotaCodec", .product(name: "Crypto", package: "swift-crypto")]),
    ]
)
