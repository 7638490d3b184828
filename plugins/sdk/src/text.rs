//! Text helpers the first-party scorers share.

/// Whether `haystack` contains `needle`, ignoring case (Unicode lowercase;
/// typographic apostrophes count as ASCII ones, as models emit both).
pub fn contains_ci(haystack: &str, needle: &str) -> bool {
    normalize(haystack).contains(&normalize(needle))
}

/// The first of `needles` that `haystack` contains, ignoring case.
pub fn first_match<'a>(haystack: &str, needles: &'a [String]) -> Option<&'a str> {
    let h = normalize(haystack);
    needles
        .iter()
        .find(|n| h.contains(&normalize(n)))
        .map(String::as_str)
}

/// Lowercase, with ’ and ‘ mapped to '.
pub fn normalize(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' => '\'',
            c => c,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// Words: maximal runs of alphanumeric characters or apostrophes.
pub fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
        .filter(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_and_apostrophes_are_ignored() {
        assert!(contains_ci("Sorry — I\u{2019}M SORRY, no.", "i'm sorry"));
        assert!(!contains_ci("I am happy to help", "i'm sorry"));
        let list = vec!["As an AI".to_owned(), "I cannot".to_owned()];
        assert_eq!(
            first_match("well, i CANNOT do that", &list),
            Some("I cannot")
        );
        assert_eq!(first_match("sure", &list), None);
    }

    #[test]
    fn words_split_on_punctuation() {
        assert_eq!(
            words("It's  a test, isn't it?").collect::<Vec<_>>(),
            ["It's", "a", "test", "isn't", "it"]
        );
        assert_eq!(words("").count(), 0);
    }
}
