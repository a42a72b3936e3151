import BleotaEngine

extension ProtocolRegistry {
    /// bleota's built-in protocols, in order of preference when several fit:
    /// its own first, then MCUmgr's SMP (which an MCUboot image picks by itself), then
    /// Nordic's Secure DFU (which a package or an image with its .dat picks), then Nordic's
    /// legacy DFU (which an adafruit-nrfutil package picks), then Espressif's BLE OTA (which an ESP-IDF application image picks) Dialog's SUOTA (which a DA1469x image picks), TI's OAD (which an OAD image picks) and Silicon Labs' OTA DFU (which a .gbl file picks).
    public static let builtIn = ProtocolRegistry([
        NativeProtocol(), SMPProtocol(), NordicSecureDFUProtocol(), NordicLegacyDFUProtocol(), EspressifOTAProtocol(), SUOTAProtocol(), TIOADProtocol(), SiliconLabsOTAProtocol(),
    ])
}
