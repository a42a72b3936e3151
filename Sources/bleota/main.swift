import BleotaCommands
import Foundation

exit(await BleotaCommand.run(arguments: Array(CommandLine.arguments.dropFirst())))
