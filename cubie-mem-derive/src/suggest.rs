//! "Did you mean" suggestions for misspelt keys and keywords.

/// The known item whose name is closest to `word`, when it is close enough
/// to be a typo (an edit distance of at most a third of its length, and at
/// least 1) and no other item is as close: a suggestion is also what a
/// misspelt key is read as, so an ambiguous one is not made.
pub(crate) fn did_you_mean<T: Copy>(
    word: &str,
    known: &[T],
    name: impl Fn(T) -> &'static str,
) -> Option<T> {
    let allowed = (word.chars().count() / 3).max(1);
    let mut close = known
        .iter()
        .map(|item| (edit_distance(word, name(*item)), *item))
        .filter(|(distance, _)| *distance <= allowed);
    let (mut best_distance, mut best) = close.next()?;
    let mut tied = false;
    for (distance, item) in close {
        if distance < best_distance {
            (best_distance, best, tied) = (distance, item, false);
        } else if distance == best_distance {
            tied = true;
        }
    }
    (!tied).then_some(best)
}

/// Edit distance between two words in characters, counting an insertion,
/// a deletion, a substitution or a swap of neighbours as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let substitution = rows[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(rows[i - 1][j] + 1).min(rows[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_count_edits() {
        assert_eq!(edit_distance("shape", "shape"), 0);
        assert_eq!(edit_distance("shpe", "shape"), 1);
        assert_eq!(edit_distance("chunk_axes", "chunk_axis"), 1);
        assert_eq!(edit_distance("", "dims"), 4);
        assert_eq!(edit_distance("lable", "label"), 1);
    }

    #[test]
    fn suggests_only_close_words() {
        let keys = [
            "shape",
            "chunk_axis",
            "unchunkable",
            "precision",
            "memory",
            "label",
        ];
        let suggest = |word| did_you_mean(word, &keys, |key| key);
        assert_eq!(suggest("shpe"), Some("shape"));
        assert_eq!(suggest("chunkaxis"), Some("chunk_axis"));
        assert_eq!(suggest("lable"), Some("label"));
        assert_eq!(suggest("dtype"), None);
    }

    #[test]
    fn a_tie_suggests_nothing() {
        let keys = ["abc", "abd"];
        assert_eq!(did_you_mean("abx", &keys, |key| key), None);
        assert_eq!(did_you_mean("abcc", &keys, |key| key), Some("abc"));
    }
}
