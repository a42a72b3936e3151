/// The name a user most likely meant by a misspelt one: for "did you mean" in the one-line
/// errors for an unknown protocol or command (`--protocol smpp`, `bleota flsh`), as
/// argument-parser already does for a misspelt option (`--jsn`).
public enum NameSuggestion {
    /// The candidate nearest to `name` by edit distance (insertions, deletions, substitutions
    /// and swaps of neighbours count one each), if it is close: at most 2 edits, and fewer
    /// than half of the name's letters. Ties go to the first candidate.
    public static func closest(to name: String, among candidates: [String]) -> String? {
        let typed = Array(name.lowercased())
        guard !typed.isEmpty else { return nil }
        var best: (candidate: String, distance: Int)?
        for candidate in candidates where candidate != name {
            let distance = editDistance(typed, Array(candidate.lowercased()))
            if distance <= 2, distance * 2 < max(typed.count, 2), distance < (best?.distance ?? .max) {
                best = (candidate, distance)
            }
        }
        return best?.candidate
    }

    /// Optimal string alignment distance (Damerau–Levenshtein without repeated edits of a substring).
    static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previousRow: [Int] = []
        var row = Array(0...b.count)
        for i in 1...a.count {
            let twoBack = previousRow
            previousRow = row
            row = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                let substitution = previousRow[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
                row[j] = min(previousRow[j] + 1, row[j - 1] + 1, substitution)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    row[j] = min(row[j], twoBack[j - 2] + 1)
                }
            }
        }
        return row[b.count]
    }
}
