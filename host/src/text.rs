//! Small text helpers shared by messages and printed summaries.

/// `text` quoted, cut to `max` characters with an ellipsis.
pub fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// Items joined with ", ", or "none" when there are none.
pub fn list<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(super::excerpt("héllo", 2), "\"hé\"…");
        assert_eq!(super::excerpt("hi", 5), "\"hi\"");
    }
}
