import BleotaCodec
import BleotaEngine
import BleotaLink

// `push` and `pull` over SMP's file-system group, each checked against the
// device's own SHA-256 of the file.
extension SMPUpdater {
    /// A device path for `name`: as given when absolute, else under Zephyr's usual LittleFS mount.
    public static func devicePath(_ name: String) -> String { name.hasPrefix("/") ? name : "/lfs/" + name }

    /// Writes `file` to `name` on the device, then checks the device's SHA-256 of it.
    public func push(_ file: [UInt8], name: String) async throws(TransferError) -> UpdateReport {
        try await fileSession("push", name: name) {
            (connection: SMPConnection, parameters: MCUmgrParameters, path: String, began: Duration) async throws(TransferError) -> ([UInt8], UploadResult) in
            var offset = 0
            var result = UploadResult(bytes: file.count, window: 1)
            let chunk = max(1, min(chunkSize ?? .max, parameters.bufferSize - SMPHeader.size - 32 - path.utf8.count))
            result.chunkSize = chunk
            repeat {
                let end = min(file.count, offset + chunk)
                let request = SMPFileUploadRequest(
                    name: path, offset: offset, data: Array(file[offset..<end]),
                    length: offset == 0 ? file.count : nil)
                let answer: SMPFileOffsetResponse
                do throws(SMPClientError) {
                    answer = try await connection.request(request, timeout: timeouts.response, attempts: timeouts.attempts)
                } catch { throw fail(.transfer, error) }
                result.requests += 1
                guard (0...file.count).contains(answer.offset) else {
                    throw TransferError(.protocolViolation, step: .transfer, "the file upload answer's 'off' is outside the file")
                }
                if answer.offset < end {
                    result.resentBytes += end - answer.offset
                    result.resentRequests += 1
                }
                offset = answer.offset
                progress(offset, of: file.count, requests: result.requests, began: began)
            } while offset < file.count
            result.elapsed = clock.now - began
            return (file, result)
        }.report
    }

    /// Reads `name` from the device, checking its SHA-256 when the device can compute it.
    public func pull(_ name: String) async throws(TransferError) -> PulledFile {
        let (file, report) = try await fileSession("pull", name: name) {
            (connection: SMPConnection, parameters: MCUmgrParameters, path: String, began: Duration) async throws(TransferError) -> ([UInt8], UploadResult) in
            var file: [UInt8] = []
            var total: Int?
            var result = UploadResult(bytes: 0, window: 1, chunkSize: parameters.bufferSize)
            repeat {
                let answer: SMPFileDownloadResponse
                do throws(SMPClientError) {
                    answer = try await connection.request(
                        SMPFileDownloadRequest(name: path, offset: file.count),
                        timeout: timeouts.response, attempts: timeouts.attempts)
                } catch { throw fail(.transfer, error) }
                result.requests += 1
                if total == nil {
                    guard let length = answer.length, length >= 0 else {
                        throw TransferError(.protocolViolation, step: .transfer, "the first download answer lacks the file's 'len'")
                    }
                    total = length
                }
                guard answer.offset == file.count, file.count + answer.data.count <= total!, !(answer.data.isEmpty && file.count < total!) else {
                    throw TransferError(.protocolViolation, step: .transfer, "the download answer does not continue at offset \(file.count)")
                }
                file += answer.data
                progress(file.count, of: total!, requests: result.requests, began: began)
            } while file.count < total!
            result.bytes = file.count
            result.elapsed = clock.now - began
            return (file, result)
        }
        return PulledFile(bytes: file, report: report)
    }

    private func progress(_ done: Int, of total: Int, requests: Int, began: Duration) {
        onEvent(
            .progress(
                TransferProgress(
                    bytesAcknowledged: done, totalBytes: total, packetsSent: requests, packetsResent: 0,
                    packetsLost: 0, elapsed: clock.now - began, window: 1, interPacketDelay: .zero)))
    }

    /// connect → read the parameters → `transfer` → the device's SHA-256 of the file → report.
    /// The connection is closed however it ends.
    private func fileSession(
        _ operation: String, name: String,
        transfer: (SMPConnection, MCUmgrParameters, String, Duration) async throws(TransferError) -> ([UInt8], UploadResult)
    )
        async throws(TransferError) -> (file: [UInt8], report: UpdateReport)
    {
        var recorder = context.recorder(operation)
        let path = Self.devicePath(name)
        recorder.enter(.connect)
        let connection = try await connect(.initial, step: .connect)
        do throws(TransferError) {
            let parameters: MCUmgrParameters
            do { parameters = try await connection.parameters(timeout: timeouts.response) } catch { throw fail(.connect, error) }
            try await recorder.enterTransfer()
            let (file, result) = try await transfer(connection, parameters, path, clock.now)
            recorder.enter(.verify)
            try await verifyFile(path, expected: SHA256Digest.hash(file), length: file.count, connection: connection)
            await connection.close()
            return (file, report(&recorder, result, bytes: file.count))
        } catch {
            await connection.close()
            throw error
        }
    }

    /// The file group's hash command (SHA-256) against what was sent or received.
    func verifyFile(_ path: String, expected: [UInt8], length: Int, connection: SMPConnection) async throws(TransferError) {
        let answer: SMPFileHash
        do {
            answer = try await connection.request(
                SMPFileHashRequest(name: path, type: "sha256"), timeout: timeouts.verify,
                attempts: timeouts.attempts)
        } catch .device(let error) where error.code == .general(.notSupported) {
            onEvent(.note("the device cannot hash files (not supported); the transfer's sizes matched"))
            return
        } catch {
            throw fail(.verify, error)
        }
        guard answer.output.byteString == expected, answer.length == length else {
            throw TransferError(.verificationFailed, step: .verify, "the device's SHA-256 of \(path) differs from the host's: the copy is damaged")
        }
    }
}
