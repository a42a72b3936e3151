import BleotaCodec
import BleotaEngine
import BleotaLink

/// A device that speaks a described protocol — the device half of
/// ``DescribedProtocol``, built from the same ``ProtocolDescription`` the host
/// half runs, so a description can be tried against the simulator (and
/// `bleota sim serve`, `bleota serve`) before any hardware.
///
/// Its rules are the description's: the start command opens an upload (an
/// image larger than the slot is refused), data packets are taken strictly in
/// order (a gap or a bad checksum fails the upload or is dropped, as
/// `transfer.gap` and `transfer.bad-checksum` say), acknowledgements or block
/// requests follow `transfer.flow`, and the end command checks the size, the
/// packet count, the CRC-32 and the image's own check before the new image is
/// activated. A failed upload is answered with the status its description
/// names and never activated: the old image keeps running.
package actor DescribedDevice: DeviceHalf {
    package nonisolated let description: ProtocolDescription
    package nonisolated let slotSize: Int
    /// The image it runs (what survives a reboot).
    package private(set) var running: [UInt8]
    private var inBootloader = false
    private var enterBootloaderAtBoot = false
    private var upload: Upload?
    /// An image that passed the end's checks and waits for the activate command.
    private var verified: [UInt8]?

    /// What an upload holds in RAM.
    struct Upload {
        var variables: [String: UInt64]
        var received: [UInt8] = []
        var packets = 0
        var failure: ProtocolDescription.StatusMeaning?
        var sinceAcknowledged = 0
        /// The index last answered with a gap acknowledgement, so a run of out-of-order packets gets one answer.
        var gapAnswered: Int?
        /// The packets asked for and not yet received (request flow).
        var requestedUpTo = 0
    }

    package init(description: ProtocolDescription, slotSize: Int, initialImage: [UInt8]) {
        self.description = description
        self.slotSize = slotSize
        running = initialImage
    }

    package var mode: DeviceMode { inBootloader ? .bootloader : .application }

    /// A bootloader that erased the application holds none: it waits for one.
    package var firmware: FirmwareState { running.isEmpty ? FirmwareState(running: nil, mode: .bootloader) : FirmwareState(running: running, mode: mode) }

    package var runningVersion: String {
        inBootloader ? "bootloader" : "\(running.count) bytes (SHA-256 \(SHA256Digest.hash(running).hexString))"
    }

    package var bootloaderKeepsAddress: Bool { description.update.bootloaderAddress == .same }

    package nonisolated var whenQueueFull: FullQueueHandling { description.transfer.whenQueueFull }

    package var offeredChannels: [UInt8]? {
        guard description.update.enterBootloader != nil else { return nil }
        let role: ProtocolDescription.DeviceRole = inBootloader ? .bootloader : .application
        return description.characteristics.indices.filter { description.characteristics[$0].offeredIn.contains(role) }.map { UInt8($0) }
    }

    package var readableValues: [UInt8: [UInt8]] {
        var values: [UInt8: [UInt8]] = [:]
        for (index, characteristic) in description.characteristics.enumerated() where characteristic.readable { values[UInt8(index)] = [] }
        return values
    }

    package func powerCycle() {
        // A bootloader with no application to start stays (STM32WB's after its erase).
        inBootloader = enterBootloaderAtBoot || (description.update.enterBootloader != nil && running.isEmpty)
        enterBootloaderAtBoot = false
        upload = nil
        verified = nil
    }

    package func serve(_ link: any Link, environment: DeviceEnvironment) async {
        if !description.transfer.resume { upload = nil }
        if let pending = pendingRequest() { try? await link.send(message: pending) }
        while true {
            let packet: ChannelMessage
            do {
                // Requests are repeated when nothing arrives for a while (a lost packet or request).
                if case .requested = description.transfer.flow, upload != nil {
                    guard let next = try await link.receiveMessage(within: .milliseconds(300), clock: environment.clock) else {
                        if let pending = pendingRequest(again: true) { try await link.send(message: pending) }
                        continue
                    }
                    packet = next
                } else {
                    packet = try await link.receiveMessage()
                }
            } catch { return }
            let cost = environment.processingTime(packet.framedSize)
            if cost > .zero { try? await environment.clock.sleep(for: cost) }
            if packet == .directoryQuery {
                do { try await link.send(message: .directory(offeredChannels ?? description.characteristics.indices.map { UInt8($0) })) } catch { return }
                continue
            }
            if case .read(let channel) = packet {
                // A read of a readable characteristic: the value is empty (Telink's hosts read only to pace themselves).
                guard description.characteristics.indices.contains(Int(channel)), description.characteristics[Int(channel)].readable else { continue }
                do { try await link.send(channel: channel, []) } catch { return }
                continue
            }
            guard case .packet(let channel, let payload) = packet else { continue }
            let reboot: RebootRequest?
            do throws(LinkError) {
                reboot = try await received(payload, channel: channel, link: link, environment: environment)
            } catch { return }
            if let reboot {
                await environment.reboot(reboot)
                return
            }
        }
    }

    private func answer(_ name: String, _ variables: [String: UInt64]) -> ChannelMessage {
        let template = description.message(name)
        return .packet(template.channel, template.encode(variables))
    }

    private func status(_ meaning: ProtocolDescription.StatusMeaning?) -> UInt64 {
        guard let meaning else { return description.statuses.success }
        return description.statuses.code(for: meaning) ?? description.statuses.codes.keys.min() ?? description.statuses.success &+ 1
    }

    private func received(_ payload: ArraySlice<UInt8>, channel: UInt8, link: any Link, environment: DeviceEnvironment) async throws(LinkError) -> RebootRequest? {
        let update = description.update
        if let jump = update.enterBootloader, !inBootloader {
            let template = description.message(jump.send)
            if template.channel == channel, case .matched = template.decode(payload) {
                if let answer = jump.answer { try await link.send(message: self.answer(answer, ["status": status(nil)])) }
                enterBootloaderAtBoot = true
                if description.update.bootloaderErasesApplication { running = [] }
                return RebootRequest(toBootloader: true)
            }
            return nil
        }
        let packet = description.message(description.transfer.packet)
        // Commands first: a data packet's template is usually the loosest.
        if let start = update.start, case .matched(let variables, _) = description.message(start.send).decode(payload), description.message(start.send).channel == channel {
            var meaning: ProtocolDescription.StatusMeaning?
            if let size = variables["image-size"], size > UInt64(slotSize) { meaning = .tooBig }
            // The same image started again keeps what arrived, when the device keeps its progress.
            let kept = description.transfer.resume && upload?.failure == nil && upload?.variables == variables ? upload : nil
            upload = meaning == nil ? (kept ?? Upload(variables: variables)) : nil
            if let current = upload { upload?.requestedUpTo = current.packets }
            verified = nil
            var reply = ["status": status(meaning)]
            if let current = upload {
                reply["next-index"] = Self.wrapped(UInt64(current.packets), like: description.message(description.transfer.packet), variable: "index")
            }
            if let answer = start.answer { try await link.send(message: self.answer(answer, reply)) }
            if let pending = pendingRequest() { try await link.send(message: pending) }
            return nil
        }
        if case .matched(let variables, _) = description.message(update.end.send).decode(payload), description.message(update.end.send).channel == channel {
            return try await end(variables, link: link, environment: environment)
        }
        if let activate = update.activate, description.message(activate.send).channel == channel,
            case .matched = description.message(activate.send).decode(payload)
        {
            guard let image = verified else {
                if let answer = activate.answer { try await link.send(message: self.answer(answer, ["status": status(.notStarted)])) }
                return nil
            }
            if let answer = activate.answer { try await link.send(message: self.answer(answer, ["status": status(nil)])) }
            return install(image)
        }
        guard packet.channel == channel else { return nil }
        if update.start == nil, upload == nil { upload = Upload(variables: [:]) }
        guard let before = upload, before.failure == nil else { return nil }
        try await take(payload, into: before, link: link, environment: environment)
        guard let failure = upload?.failure, description.transfer.failureReboots else { return nil }
        // Reported at once, and the device restarts into the image it had.
        upload = nil
        if let answer = update.end.answer { try await link.send(message: self.answer(answer, ["status": status(failure)])) }
        return RebootRequest(toBootloader: false)
    }

    /// One data packet into the upload.
    private func take(_ payload: ArraySlice<UInt8>, into before: Upload, link: any Link, environment: DeviceEnvironment) async throws(LinkError) {
        var current = before
        defer { upload = current }
        let packet = description.message(description.transfer.packet)
        switch packet.decode(payload) {
        case .mismatch, .badChecksum:
            switch description.transfer.badChecksum {
            case .fail: current.failure = .badChecksum
            case .drop: try await answerGap(&current, link: link)
            }
            return
        case .matched(let variables, let range):
            let expected = current.packets
            if let index = variables["index"], index != Self.wrapped(UInt64(expected), like: packet, variable: "index") {
                try await outOfOrder(&current, link: link)
                return
            }
            if let offset = variables["offset"], offset != Self.wrapped(UInt64(current.received.count), like: packet, variable: "offset") {
                try await outOfOrder(&current, link: link)
                return
            }
            let bytes = payload[(payload.startIndex + range.lowerBound)..<(payload.startIndex + range.upperBound)]
            guard current.received.count + bytes.count <= slotSize + 4096 else {
                current.failure = .tooBig
                return
            }
            current.received += bytes
            current.packets += 1
            current.gapAnswered = nil
            current.sinceAcknowledged += 1
            if environment.writeTimePerByte > .zero {
                try? await environment.clock.sleep(for: environment.writeTimePerByte * bytes.count)
            }
            switch description.transfer.flow {
            case .acknowledged(let ack, let every):
                let complete = current.variables["image-size"].map { UInt64(current.received.count) >= $0 } ?? false
                if current.sinceAcknowledged >= every || complete {
                    current.sinceAcknowledged = 0
                    try await link.send(message: answer(ack, acknowledgement(current, status: nil)))
                }
            case .requested:
                if current.packets >= current.requestedUpTo {
                    upload = current
                    if let pending = pendingRequest() { try await link.send(message: pending) }
                    current = upload!
                }
            case .none:
                break
            }
            return
        }
    }

    /// A packet that is not the next: the upload fails, or the packet is dropped and the host told where to go on.
    private func outOfOrder(_ current: inout Upload, link: any Link) async throws(LinkError) {
        switch description.transfer.gap {
        case .fail: current.failure = .gap
        case .drop: try await answerGap(&current, link: link)
        }
    }

    private func answerGap(_ current: inout Upload, link: any Link) async throws(LinkError) {
        switch description.transfer.flow {
        case .acknowledged(let ack, _):
            // One answer per gap: the host goes back on the first.
            guard current.gapAnswered != current.packets else { return }
            current.gapAnswered = current.packets
            current.sinceAcknowledged = 0
            try await link.send(message: answer(ack, acknowledgement(current, status: .gap)))
        case .requested, .none:
            break
        }
    }

    private func acknowledgement(_ current: Upload, status meaning: ProtocolDescription.StatusMeaning?) -> [String: UInt64] {
        let template = description.message(description.transfer.packet)
        return [
            "next-index": Self.wrapped(UInt64(current.packets), like: template, variable: "index"),
            "next-offset": UInt64(current.received.count), "status": status(meaning),
        ]
    }

    /// The next block request, when the flow asks for packets and some are still missing.
    private func pendingRequest(again: Bool = false) -> ChannelMessage? {
        guard case .requested(let request) = description.transfer.flow, var current = upload, current.failure == nil else { return nil }
        let template = description.message(request)
        let total = current.variables["image-size"].map { Int($0) }
        if let total, current.received.count >= total { return nil }
        guard again || current.packets >= current.requestedUpTo else { return nil }
        let count = template.variables.contains("count") ? 8 : 1
        current.requestedUpTo = current.packets + count
        upload = current
        let packet = description.message(description.transfer.packet)
        return answer(
            request,
            [
                "index": Self.wrapped(UInt64(current.packets), like: packet, variable: "index"),
                "count": UInt64(count), "status": status(nil),
            ])
    }

    /// The end command: every check the description implies, then the answer, then (with no activate step) the restart.
    private func end(_ variables: [String: UInt64], link: any Link, environment: DeviceEnvironment) async throws(LinkError) -> RebootRequest? {
        let step = description.update.end
        func reply(_ meaning: ProtocolDescription.StatusMeaning?) async throws(LinkError) {
            if let answer = step.answer { try await link.send(message: self.answer(answer, ["status": status(meaning)])) }
        }
        guard var current = upload else {
            try await reply(.notStarted)
            return nil
        }
        upload = nil
        current.variables.merge(variables) { _, new in new }
        if let failure = current.failure {
            try await reply(failure)
            return nil
        }
        var image = current.received
        let packet = description.message(description.transfer.packet)
        if let size = current.variables["image-size"] {
            guard image.count >= Int(size) else {
                try await reply(.incomplete)
                return nil
            }
            image = Array(image.prefix(Int(size)))
        }
        if let count = current.variables["packet-count"], count != UInt64(current.packets) {
            try await reply(.incomplete)
            return nil
        }
        if let last = current.variables["last-index"],
            current.packets == 0
                || last != Self.wrapped(UInt64(current.packets - 1), like: packet, variable: "index")
        {
            try await reply(.incomplete)
            return nil
        }
        if let crc = current.variables["image-crc32"], crc != UInt64(CRC32.checksum(image)) {
            try await reply(.verifyFailed)
            return nil
        }
        // The image's own size field says where it ends (the last packet may carry padding).
        for check in description.image.checks {
            if case .sizeAt(let at) = check, at + 4 <= image.count {
                let size = Int(MessageTemplate.read(image[at..<at + 4], bigEndian: false))
                if size <= image.count { image = Array(image.prefix(size)) }
            }
        }
        if description.image.checks.contains(where: { $0.problem(image) != nil }) {
            guard let answer = step.answer, description.message(answer).variables.contains("status") else {
                // A device with no way to say so answers as usual and then refuses to boot the image.
                try await reply(nil)
                return RebootRequest(toBootloader: false)
            }
            try await reply(.verifyFailed)
            return description.transfer.failureReboots ? RebootRequest(toBootloader: false) : nil
        }
        try await reply(nil)
        guard description.update.activate == nil else {
            verified = image
            return nil
        }
        return install(image)
    }

    private func install(_ image: [UInt8]) -> RebootRequest {
        running = image
        verified = nil
        enterBootloaderAtBoot = false
        return RebootRequest(toBootloader: false)
    }

    /// `value` as a template's field for `variable` carries it (an index of two bytes wraps at 65 536).
    static func wrapped(_ value: UInt64, like template: MessageTemplate, variable: String) -> UInt64 {
        for field in template.fields {
            if case .integer(let integer) = field, integer.value == .variable(variable) { return value & integer.mask }
        }
        return value
    }
}
