import Testing
@testable import BleotaCommands
@Test func parses() throws { _ = try BleotaCommand.parseAsRoot([]) }
