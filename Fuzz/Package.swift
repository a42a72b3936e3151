// swift-tools-version: 6.0
//
// Coverage-guided fuzzing of bleota's parsers of untrusted bytes, with
// libFuzzer. A separate package so the main build and CI never see it; it
// uses the main package's modules as they are (no sources are copied).
//
// Build and run through scripts/fuzz (docs/testing.md, "Fuzzing"); by hand:
//   swift build -c release --package-path Fuzz --scratch-path .build-fuzz/build -Xswiftc -sanitize=fuzzer
//   .build-fuzz/build/release/FuzzCBOR -runs=100000 .build-fuzz/corpus/FuzzCBOR
//
// Each Fuzz* executable defines `LLVMFuzzerTestOneInput` and checks
// invariants (round trips, error positions inside the input), not only that
// nothing traps. Its `@main` hands that function to libFuzzer's driver
// (`LLVMFuzzerRunDriver`), because SwiftPM gives every executable its own
// `main` and so libFuzzer's would never run.
import PackageDescription

let codec = Target.Dependency.product(name: "BleotaCodec", package: "bleota")
let link = Target.Dependency.product(name: "BleotaLink", package: "bleota")
let att = Target.Dependency.product(name: "BleotaATT", package: "bleota")
let protocols = Target.Dependency.product(name: "BleotaProtocols", package: "bleota")
let engine = Target.Dependency.product(name: "BleotaEngine", package: "bleota")
let bluez = Target.Dependency.product(name: "BleotaBlueZ", package: "bleota")

/// One executable per parser: name and what it needs besides FuzzSupport.
let fuzzers: [(name: String, dependencies: [Target.Dependency])] = [
    ("FuzzIntelHex", [codec]),
    ("FuzzSRecord", [codec]),
    ("FuzzMCUboot", [codec]),
    ("FuzzCBOR", [codec]),
    ("FuzzSMPPacket", [codec, protocols]),
    ("FuzzSMPReassembler", [codec, protocols]),
    ("FuzzSMPSerial", [codec, protocols]),
    ("FuzzATTPDU", [codec, att]),
    ("FuzzNativeMessage", [codec, protocols]),
    ("FuzzNativeReassembler", [codec, protocols]),
    ("FuzzSMPDevice", [codec, link, engine, protocols]),
    ("FuzzNativeDevice", [codec, link, engine, protocols]),
    ("FuzzNordicInitPacket", [codec, protocols, .product(name: "Crypto", package: "swift-crypto")]),
    ("FuzzNordicPackage", [protocols]),
    ("FuzzNordicBootloaders", [codec, protocols]),
    ("FuzzNordicSerial", [codec, protocols]),
    ("FuzzProtocolDescription", [codec, protocols]),
    ("FuzzVendorMessages", [codec, protocols]),
    ("FuzzManagementEvent", [codec, bluez]),
    ("FuzzDeltaPatch", [codec]),
]

let package = Package(
    name: "bleota-fuzz",
    dependencies: [.package(name: "bleota", path: ".."), .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.0")],
    targets: [
        // libFuzzer's entry point, declared for Swift (the library comes with -sanitize=fuzzer).
        .target(name: "CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer", codec, link]),
    ] + fuzzers.map { .executableTarget(name: $0.name, dependencies: ["FuzzSupport"] + $0.dependencies) }
)
