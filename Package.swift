// swift-tools-version: 6.1
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
        .library(name: "BleotaSystem", targets: ["BleotaSystem"]),
        .library(name: "BleotaATT", targets: ["BleotaATT"]),
        .library(name: "BleotaEngine", targets: ["BleotaEngine"]),
        .library(name: "BleotaProtocols", targets: ["BleotaProtocols"]),
        .library(name: "BleotaSimulator", targets: ["BleotaSimulator"]),
        .library(name: "BleotaBlueZ", targets: ["BleotaBlueZ"]),
        .library(name: "BleotaFleet", targets: ["BleotaFleet"]),
        .library(name: "BleotaCampaign", targets: ["BleotaCampaign"]),
        .library(name: "BleotaCommands", targets: ["BleotaCommands"]),
    ],
    // Fleet campaigns need PostgreSQL's client (swift-nio, swift-nio-ssl and a second BoringSSL),
    // most of a first build: only a build that asks for them compiles it, `swift build --traits
    // Campaigns` (scripts/test does). Without the trait `bleota fleet campaign`, `worker` and
    // `status` say how to get them, and exit 12.
    traits: [
        .trait(name: "Campaigns", description: "Fleet campaigns kept in PostgreSQL: bleota fleet campaign, worker and status.")
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.0"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        .package(url: "https://github.com/weichsel/ZIPFoundation.git", from: "0.9.20"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.0"),
    ],
    targets: [
        // C libraries, reached only through their wrapper modules.
        .systemLibrary(
            name: "CSystemZlib", path: "Sources/CSystemZlib", pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(
            name: "CBlueZ", path: "Sources/CBlueZ", pkgConfig: "bluez",
            providers: [.apt(["libbluetooth-dev"])]),
        // sd-bus (libsystemd): bluetoothd's D-Bus API, for pairing beside it (BleotaBlueZ's BluetoothDaemonAgent).
        .systemLibrary(
            name: "CSDBus", path: "Sources/CSDBus", pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]),
        // epoll(7), which Swift's Glibc module leaves out: BleotaSystem's reactor (DescriptorReactor) waits through it.
        .systemLibrary(name: "CEpoll", path: "Sources/CEpoll"),
        .target(name: "BleotaZlib", dependencies: ["CSystemZlib"]),

        // Layers, bottom up.
        .target(
            name: "BleotaCodec",
            dependencies: ["BleotaZlib", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "BleotaLink", dependencies: ["BleotaCodec"]),
        // What only Linux has: the epoll reactor and its descriptors, UDP and serial links,
        // signals, temporary paths and atomic files. The layers below the CLI but BlueZ use
        // none of it (scripts/check-portable), so they build for another platform's Bluetooth API.
        .target(name: "BleotaSystem", dependencies: ["BleotaLink", "BleotaCodec", "CEpoll"]),
        .target(name: "BleotaATT", dependencies: ["BleotaLink", "BleotaCodec"]),
        .target(
            name: "BleotaEngine",
            dependencies: ["BleotaATT", "BleotaLink", "BleotaCodec", .product(name: "Logging", package: "swift-log")]),
        .target(
            name: "BleotaProtocols",
            dependencies: ["BleotaEngine", "BleotaLink", "BleotaCodec", "BleotaZlib",
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "Crypto", package: "swift-crypto"),
                           .product(name: "Yams", package: "Yams")]),
        .target(
            name: "BleotaSimulator",
            dependencies: ["BleotaProtocols", "BleotaEngine", "BleotaATT", "BleotaLink", "BleotaCodec"]),
        .target(name: "BleotaFleet", dependencies: ["BleotaEngine", "BleotaLink", "BleotaCodec", .product(name: "Logging", package: "swift-log")]),
        // A fleet campaign shared by workers on many hosts, kept in PostgreSQL.
        // Without the Campaigns trait it holds a campaign's types, address and schema; the store and the worker need the trait.
        // A worker's counters go out through swift-metrics to a Prometheus registry, served by
        // BleotaSystem's TCP listener on the reactor (`fleet worker --metrics`).
        .target(name: "BleotaCampaign", dependencies: ["BleotaFleet", "BleotaEngine", "BleotaSystem",
                                                       .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Campaigns"])),
                                                       .product(name: "CoreMetrics", package: "swift-metrics", condition: .when(traits: ["Campaigns"])),
                                                       .product(name: "Prometheus", package: "swift-prometheus", condition: .when(traits: ["Campaigns"])),
                                                       .product(name: "NIOSSL", package: "swift-nio-ssl", condition: .when(traits: ["Campaigns"])),
                                                       .product(name: "Crypto", package: "swift-crypto"),
                                                       .product(name: "Logging", package: "swift-log")]),
        .target(name: "BleotaBlueZ", dependencies: ["CBlueZ", "CSDBus", "BleotaEngine", "BleotaLink", "BleotaSystem", "BleotaATT",
                                                   .product(name: "Logging", package: "swift-log"),
                                                   // AES-128 for resolving private addresses (ah, Core Vol 3 Part H 2.2.2).
                                                   .product(name: "_CryptoExtras", package: "swift-crypto")]),
        .target(
            name: "BleotaCommands",
            dependencies: [
                "BleotaCodec", "BleotaLink", "BleotaSystem", "BleotaEngine", "BleotaProtocols", "BleotaSimulator", "BleotaBlueZ", "BleotaFleet", "BleotaCampaign",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .executableTarget(name: "bleota", dependencies: ["BleotaCommands"]),
        // Figures, not tests: `swift run -c release bleota-bench` (see README "Performance").
        .executableTarget(
            name: "bleota-bench", dependencies: ["BleotaCodec", "BleotaLink", "BleotaEngine", "BleotaProtocols", "BleotaSimulator", "BleotaFleet",
                                                .product(name: "Logging", package: "swift-log")],
            path: "Benchmarks/Bench"),
        // Outcome counts over thousands of seeded faulty updates: `swift run -c release bleota-fault-matrix --runs 10000`.
        .executableTarget(
            name: "bleota-fault-matrix", dependencies: ["BleotaCodec", "BleotaLink", "BleotaEngine", "BleotaProtocols", "BleotaSimulator"],
            path: "Benchmarks/FaultMatrix"),

        // Seeded random inputs whose seed is printed, for every test target.
        .target(name: "BleotaTestSupport", dependencies: ["BleotaLink", "BleotaATT", "BleotaEngine"], path: "Tests/BleotaTestSupport"),
        .testTarget(name: "BleotaCodecTests", dependencies: ["BleotaTestSupport", "BleotaCodec", "BleotaSystem", "BleotaZlib", .product(name: "Crypto", package: "swift-crypto")],
                    resources: [.copy("Fixtures")]),
        .testTarget(name: "BleotaLinkTests", dependencies: ["BleotaTestSupport", "BleotaLink", "BleotaCodec"]),
        .testTarget(name: "BleotaSystemTests", dependencies: ["BleotaTestSupport", "BleotaSystem", "BleotaLink", "BleotaCodec"]),
        .testTarget(name: "BleotaATTTests", dependencies: ["BleotaTestSupport", "BleotaATT", "BleotaLink", "BleotaCodec"]),
        .testTarget(name: "BleotaBlueZTests", dependencies: ["BleotaTestSupport", "BleotaBlueZ", "BleotaATT", "BleotaLink", "BleotaSystem", "BleotaCodec",
                                                         .product(name: "Logging", package: "swift-log")],
                    resources: [.copy("Fixtures")]),
        .testTarget(name: "BleotaEngineTests", dependencies: ["BleotaTestSupport", "BleotaEngine", "BleotaLink", "BleotaCodec"]),
        .testTarget(name: "BleotaSimulatorTests", dependencies: ["BleotaTestSupport", "BleotaSimulator", "BleotaProtocols", "BleotaEngine", "BleotaLink", "BleotaCodec",
                                                            .product(name: "Crypto", package: "swift-crypto")]),
        .testTarget(name: "BleotaProtocolsTests", dependencies: ["BleotaTestSupport", "BleotaProtocols", "BleotaEngine", "BleotaCodec", "BleotaLink", "BleotaSystem", "BleotaATT",
                                                            .product(name: "Crypto", package: "swift-crypto"),
                                                            .product(name: "ZIPFoundation", package: "ZIPFoundation")],
                    resources: [.copy("Fixtures")]),
        .testTarget(name: "BleotaFleetTests", dependencies: ["BleotaTestSupport", "BleotaFleet", "BleotaSimulator", "BleotaProtocols", "BleotaEngine",
                                                        "BleotaLink", "BleotaCodec"]),
        .testTarget(name: "BleotaCampaignTests", dependencies: ["BleotaTestSupport", "BleotaCampaign", "BleotaFleet", "BleotaEngine", "BleotaLink",
                                                           .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Campaigns"]))]),
        .testTarget(name: "BleotaCommandsTests", dependencies: ["BleotaTestSupport", "BleotaCommands", "BleotaCodec", "BleotaLink", "BleotaProtocols", .product(name: "Crypto", package: "swift-crypto")],
            exclude: ["Golden"]),
    ]
)
