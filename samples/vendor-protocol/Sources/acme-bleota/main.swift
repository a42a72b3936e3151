import AcmeOTA
import BleotaCommands
import BleotaProtocols
import Foundation

// bleota's own commands, with ACME OTA registered beside the built-in protocols:
// `acme-bleota flash app.bin --protocol acme-ota --device sim://2m-dle?protocol=acme-ota`.
exit(
    await BleotaCommand.run(
        arguments: Array(CommandLine.arguments.dropFirst()),
        registry: .builtIn.registering(AcmeOTAProtocol())))
