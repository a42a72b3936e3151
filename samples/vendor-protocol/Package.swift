// swift-tools-version: 6.1
//
// A vendor's own OTA protocol ("ACME OTA") added to bleota without touching
// bleota's sources: it depends on bleota's library products, implements the
// UpdateProtocol interface (host half, device half, wire format), and ships an
// executable that registers it and runs bleota's own commands.
import PackageDescription

let package = Package(
    name: "vendor-protocol",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "AcmeOTA", targets: ["AcmeOTA"]),
        .executable(name: "acme-bleota", targets: ["acme-bleota"]),
    ],
    // bleota's fleet campaigns (PostgreSQL) only when asked for: bleota's own scripts/test builds
    // this sample with --traits Campaigns so that it shares bleota's build; a vendor need not.
    traits: [
        .trait(name: "Campaigns", description: "bleota with its fleet campaigns kept in PostgreSQL (bleota's Campaigns trait).")
    ],
    dependencies: [
        .package(name: "bleota", path: "../..", traits: [.trait(name: "Campaigns", condition: .when(traits: ["Campaigns"]))]),
    ],
    targets: [
        .target(name: "AcmeOTA", dependencies: [
            .product(name: "BleotaEngine", package: "bleota"),
            .product(name: "BleotaLink", package: "bleota"),
            .product(name: "BleotaCodec", package: "bleota"),
            .product(name: "BleotaATT", package: "bleota"),
        ]),
        .executableTarget(name: "acme-bleota", dependencies: [
            "AcmeOTA",
            .product(name: "BleotaCommands", package: "bleota"),
            .product(name: "BleotaProtocols", package: "bleota"),
        ]),
        .testTarget(name: "AcmeOTATests", dependencies: [
            "AcmeOTA",
            .product(name: "BleotaEngine", package: "bleota"),
            .product(name: "BleotaLink", package: "bleota"),
            .product(name: "BleotaSimulator", package: "bleota"),
            .product(name: "BleotaProtocols", package: "bleota"),
        ]),
    ]
)
