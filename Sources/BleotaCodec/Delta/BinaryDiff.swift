/// The difference between two images as bsdiff sees it (Colin Percival, "Naive differences of
/// executable code", 2003), which detools' sequential patches carry: a run of chunks, each a stretch
/// of the new image made by adding bytes to an equally long stretch of the old one (mostly zeros
/// where code moved and its addresses changed, so they compress), bytes that are new outright, and a
/// jump in the old image to where the next stretch starts.
public struct DiffChunk: Sendable, Hashable {
    /// Added bytewise (mod 256) to the old image from its current position.
    public var diff: [UInt8]
    /// Copied into the new image as they are.
    public var extra: [UInt8]
    /// How far the old image's position moves after `diff`, backwards when negative.
    public var adjustment: Int

    public init(diff: [UInt8], extra: [UInt8], adjustment: Int) {
        self.diff = diff
        self.extra = extra
        self.adjustment = adjustment
    }
}

public enum BinaryDiff {
    /// The chunks that rebuild `new` from `old`.
    public static func chunks(from old: [UInt8], to new: [UInt8]) -> [DiffChunk] {
        guard !new.isEmpty else { return [] }
        let suffixes = SuffixArray.build(old)
        var chunks: [DiffChunk] = []
        // Where the last chunk's diff begins in the new image and the old one, and the distance between them.
        var lastScan = 0
        var lastPosition = 0
        var lastOffset = 0
        var scan = 0
        var matchLength = 0
        var matchPosition = 0
        func oldMatches(_ newIndex: Int, offset: Int) -> Bool {
            let oldIndex = newIndex + offset
            return oldIndex >= 0 && oldIndex < old.count && old[oldIndex] == new[newIndex]
        }
        while scan < new.count {
            // Bytes of the match just found that also match at the last chunk's offset: a match no
            // better than simply going on from there is not worth a new chunk.
            var agreeing = 0
            scan += matchLength
            var counted = scan
            while scan < new.count {
                (matchPosition, matchLength) = longestMatch(of: new, at: scan, in: old, suffixes: suffixes)
                while counted < scan + matchLength {
                    if oldMatches(counted, offset: lastOffset) { agreeing += 1 }
                    counted += 1
                }
                if (matchLength == agreeing && matchLength != 0) || matchLength > agreeing + 8 { break }
                if oldMatches(scan, offset: lastOffset) { agreeing -= 1 }
                scan += 1
            }
            guard matchLength != agreeing || scan == new.count else { continue }
            // How far the last match carries on forward, approximately (more agreeing than not)…
            var forward = 0
            var best = 0
            var agreed = 0
            var length = 0
            while lastScan + length < scan, lastPosition + length < old.count {
                if old[lastPosition + length] == new[lastScan + length] { agreed += 1 }
                length += 1
                if agreed * 2 - length > best * 2 - forward {
                    best = agreed
                    forward = length
                }
            }
            // …and how far the new match reaches backward.
            var backward = 0
            if scan < new.count {
                var agreedBack = 0
                var bestBack = 0
                var step = 1
                while scan >= lastScan + step, matchPosition >= step {
                    if old[matchPosition - step] == new[scan - step] { agreedBack += 1 }
                    if agreedBack * 2 - step > bestBack * 2 - backward {
                        bestBack = agreedBack
                        backward = step
                    }
                    step += 1
                }
            }
            // Where the two overlap, split at the point that keeps the most agreeing bytes.
            let overlap = (lastScan + forward) - (scan - backward)
            if overlap > 0 {
                var score = 0
                var bestScore = 0
                var split = 0
                for index in 0..<overlap {
                    if new[lastScan + forward - overlap + index] == old[lastPosition + forward - overlap + index] { score += 1 }
                    if new[scan - backward + index] == old[matchPosition - backward + index] { score -= 1 }
                    if score > bestScore {
                        bestScore = score
                        split = index + 1
                    }
                }
                forward += split - overlap
                backward -= split
            }
            var diff = [UInt8](repeating: 0, count: forward)
            for index in 0..<forward { diff[index] = new[lastScan + index] &- old[lastPosition + index] }
            let extraStart = lastScan + forward
            let extra = Array(new[extraStart..<(scan - backward)])
            chunks.append(DiffChunk(diff: diff, extra: extra, adjustment: (matchPosition - backward) - (lastPosition + forward)))
            lastScan = scan - backward
            lastPosition = matchPosition - backward
            lastOffset = matchPosition - scan
        }
        return chunks
    }

    /// The longest prefix of `new[start...]` found in `old`: where, and how long. A binary search of
    /// the suffix array for the suffix nearest to it.
    static func longestMatch(of new: [UInt8], at start: Int, in old: [UInt8], suffixes: [Int32]) -> (position: Int, length: Int) {
        guard !old.isEmpty else { return (0, 0) }
        func commonLength(_ oldStart: Int) -> Int {
            var length = 0
            while oldStart + length < old.count, start + length < new.count, old[oldStart + length] == new[start + length] { length += 1 }
            return length
        }
        /// Whether the old suffix at `oldStart` sorts before new[start...].
        func sortsBefore(_ oldStart: Int) -> Bool {
            var index = 0
            while oldStart + index < old.count, start + index < new.count {
                let a = old[oldStart + index]
                let b = new[start + index]
                if a != b { return a < b }
                index += 1
            }
            // One is a prefix of the other: the shorter sorts first.
            return old.count - oldStart < new.count - start
        }
        var low = 0
        var high = suffixes.count - 1
        while high - low > 1 {
            let middle = low + (high - low) / 2
            if sortsBefore(Int(suffixes[middle])) { low = middle } else { high = middle }
        }
        let lowLength = commonLength(Int(suffixes[low]))
        let highLength = commonLength(Int(suffixes[high]))
        return lowLength >= highLength ? (Int(suffixes[low]), lowLength) : (Int(suffixes[high]), highLength)
    }
}
