//! Small text helpers shared by messages and printed summaries, and the one
//! place untrusted text is made safe to show: [`printable`].

use std::borrow::Cow;
use std::io::{self, Write};

/// Whether `c` would act on a terminal (or a Markdown viewer) rather than be
/// shown: C0 controls but newline and tab, DEL, C1 controls, and the Unicode
/// bidirectional overrides and isolates that reorder what is shown.
fn is_active(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `s` with every control character written as a visible escape (`\u001b`),
/// so text from plugins, models and bundles cannot set a window title,
/// write the clipboard (OSC 52), clear the screen or overwrite a line when
/// printed. Newlines and tabs are kept. The escape is JSON's: inside a JSON
/// string (`--json` output) it still means the same character, so the
/// output stays valid JSON with the same content.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_active) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_active(c) {
            // Every such character is in the Basic Multilingual Plane.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A writer that passes everything through [`printable`]: the binary's
/// standard output, so no command prints a control character it was given.
/// Bytes that are not UTF-8 are shown as `\x..`.
pub struct PrintableWriter<W: Write> {
    inner: W,
    /// The start of a UTF-8 sequence a write cut in two.
    pending: Vec<u8>,
}

impl<W: Write> PrintableWriter<W> {
    /// A writer that escapes what it is given and writes it to `inner`.
    pub fn new(inner: W) -> PrintableWriter<W> {
        PrintableWriter {
            inner,
            pending: Vec::new(),
        }
    }
}

impl<W: Write> Write for PrintableWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(buf);
        let mut rest = bytes.as_slice();
        let mut out = String::with_capacity(rest.len());
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(&printable(s));
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(&printable(std::str::from_utf8(valid).unwrap_or_default()));
                    match e.error_len() {
                        Some(n) => {
                            for b in &after[..n] {
                                out.push_str(&format!("\\x{b:02x}"));
                            }
                            rest = &after[n..];
                        }
                        None => {
                            // An incomplete sequence at the end: wait for the rest.
                            self.pending = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        self.inner.write_all(out.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for PrintableWriter<W> {
    fn drop(&mut self) {
        for b in std::mem::take(&mut self.pending) {
            let _ = write!(self.inner, "\\x{b:02x}");
        }
        let _ = self.inner.flush();
    }
}

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
    use std::io::Write;

    use super::*;

    #[test]
    fn control_characters_become_visible_escapes() {
        assert!(matches!(printable("plain\ttext\n"), Cow::Borrowed(_)));
        assert_eq!(
            printable("\u{1b}]0;title\u{7}\rover\0\u{9b}2J\u{202e}x"),
            "\\u001b]0;title\\u0007\\u000dover\\u0000\\u009b2J\\u202ex"
        );
    }

    #[test]
    fn the_writer_escapes_across_split_writes_and_bad_bytes() {
        let mut out = Vec::new();
        {
            let mut w = PrintableWriter::new(&mut out);
            // ESC, then a C1 control (U+009B, bytes C2 9B) cut between writes.
            w.write_all(b"a\x1b[2J\xc2").unwrap();
            w.write_all(b"\x9b\xffb\xe2\x80").unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "a\\u001b[2J\\u009b\\xffb\\xe2\\x80"
        );
    }

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(super::excerpt("héllo", 2), "\"hé\"…");
        assert_eq!(super::excerpt("hi", 5), "\"hi\"");
    }
}
