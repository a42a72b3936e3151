import BleotaCommands
await BleotaCommand.main()
