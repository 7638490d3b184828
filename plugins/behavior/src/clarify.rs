//! Whether a reply asks the user a clarifying question.
//!
//! The reply is cut into sentences outside code: fenced blocks (``` or
//! ~~~) are set aside, and `inline code` and URLs are masked, so no '?' in
//! them is seen. A '?' ends a question only when it follows a letter, a
//! digit or a closing mark and is followed by a space or the end: the `?`
//! of `WHERE id = ?`, `VALUES (?, ?)`, `cond ? a : b`, `parse()?;`,
//! `colou?r` or `\d+?` ends nothing. Lines are joined unless a line ends a
//! sentence (`.`, `!`, `?`, `:`), a blank line follows, or the next line is
//! a list item or a heading.
//!
//! A question sentence asks the user something when all of these hold:
//! - it does not read as code (`{`, `}`, `::`, `=>`, `->`, `==`, ` = `...);
//! - it is not rhetorical: not a bare "Why?", "Why not?", "Who knows?",
//!   "Really?"..., not opened by a negative auxiliary ("Isn't it...?",
//!   "Don't you think...?"), not "don't you think"/"wouldn't you agree";
//!   a trailing tag (", right?", ", isn't it?") is cut off and the rest is
//!   judged;
//! - it is not an offer of more help: "Does that help?", "Anything else?",
//!   "Does that make sense?" never count; "Would you like...?", "Do you
//!   want...?", "Want me to...?", "Shall I...?" are offers when they follow
//!   an answer (a code block or [`OFFER_AFTER`] words before them) or ask
//!   for something extra ("too", "also", "more", "another"...), and
//!   otherwise ask how to answer;
//! - the reply does not answer it itself: more than [`ANSWERED_AFTER`]
//!   words of non-question text (code included) follow it, or the next
//!   sentence is a code block or opens with an answer ("Yes", "No",
//!   "Because"...), or, for a question without "you", the next sentence
//!   opens with "It"/"They" or with a word of the question ("What is a
//!   closure? A closure is...");
//! - it is addressed to the user: it contains one of the `clarifying`
//!   phrases, or says "you"/"your", or a clause of it opens with an
//!   interrogative (which, what, who, when, where, how, do, is, are,
//!   should, could, can...; not "why") followed by more words, or it offers
//!   a choice ("Python 2 or Python 3?"); a list item also counts when the
//!   line introducing the list ("Do you mean:") does.
//!
//! A sentence without '?' asks too when it is a request for information
//! ("Let me know which...", "Please specify...", "I need to know...", but
//! not "Let me know if...") that the reply does not go on to answer.

use vauban_plugin_sdk::text;

/// Words of non-question text after a question beyond which the reply has
/// gone on to answer it (about two sentences).
pub const ANSWERED_AFTER: usize = 30;

/// Words before an offer-shaped question ("Would you like...?") from which
/// it follows an answer, and so offers more help.
pub const OFFER_AFTER: usize = 20;

/// Characters that may close a sentence after its '.', '!' or '?'.
const CLOSERS: &[char] = &[
    '.', '!', '?', ')', ']', '"', '\'', '\u{201d}', '\u{2019}', '*', '_', '\u{bb}',
];

/// Tokens that make a sentence read as code rather than prose.
const CODE_MARKS: &[&str] = &["{", "}", "::", "=>", "->", "==", "!=", "&&", "||", " = "];

const SECOND_PERSON: &[&str] = &[
    "you",
    "your",
    "you're",
    "you've",
    "you'd",
    "you'll",
    "yours",
    "yourself",
    "yourselves",
    "y'all",
];

/// Clause openers of a question. "why" is left out: a why-question without
/// "you" is the reply's own ("Why does this happen?").
const OPENERS: &[&str] = &[
    "which", "what", "what's", "who", "who's", "whom", "whose", "when", "where", "where's", "how",
    "how's", "do", "does", "did", "is", "are", "was", "were", "am", "should", "would", "could",
    "can", "shall", "may", "might", "will", "have", "has", "had", "must",
];

/// Words that do not count as the content after an opener ("What else?").
const EMPTY_AFTER_OPENER: &[&str] = &["not", "so", "else", "now", "then"];

/// Leading words skipped before looking at how a clause opens.
const CONNECTORS: &[&str] = &[
    "so", "and", "but", "also", "then", "now", "well", "ok", "okay", "first", "second", "third",
    "next", "finally", "lastly", "just", "oh", "hmm", "right",
];

/// Whole questions that are rhetorical.
const RHETORICAL: &[&str] = &[
    "why",
    "why not",
    "why so",
    "why bother",
    "what",
    "how",
    "how so",
    "so what",
    "what else",
    "what gives",
    "guess what",
    "you know",
    "know what",
    "you know what",
    "who knows",
    "who cares",
    "who doesn't",
    "who wouldn't",
    "really",
    "right",
    "seriously",
    "huh",
    "eh",
    "isn't it",
    "aren't they",
    "the catch",
    "the result",
    "the answer",
    "the reason",
];

/// Rhetorical anywhere in a question.
const RHETORICAL_PARTS: &[&str] = &[
    "don't you think",
    "wouldn't you agree",
    "you know what",
    "guess what",
    "who would have thought",
    "what's not to like",
    "what could possibly go wrong",
    "what could go wrong",
    "what's the worst that could happen",
];

/// Opening words of a negative (rhetorical) question.
const NEGATIVE_OPENERS: &[&str] = &[
    "isn't",
    "aren't",
    "wasn't",
    "weren't",
    "don't",
    "doesn't",
    "didn't",
    "won't",
    "wouldn't",
    "can't",
    "couldn't",
    "shouldn't",
    "haven't",
    "hasn't",
    "hadn't",
    "ain't",
];

/// Tags cut off the end of a question before it is judged.
const TAGS: &[&str] = &[
    "right",
    "correct",
    "no",
    "eh",
    "huh",
    "isn't it",
    "isn't that so",
    "isn't that right",
    "aren't they",
    "doesn't it",
    "don't they",
    "won't it",
    "wouldn't it",
    "didn't it",
    "don't you think",
    "wouldn't you agree",
];

/// Questions that close an answer and ask for nothing it needs.
const CLOSING_OFFERS: &[&str] = &[
    "does that help",
    "does this help",
    "did that help",
    "did this help",
    "anything else",
    "make sense",
    "any other question",
    "any questions",
    "any further question",
    "how does that sound",
    "sound good",
    "sounds good",
    "does that answer",
    "does this answer",
    "what you were looking for",
    "what you're looking for",
    "need more help",
    "need further help",
    "need any more help",
    "need any other help",
];

/// How an offer of more work opens; an offer only after an answer.
const PROPOSALS: &[&str] = &[
    "would you like",
    "do you want",
    "want me to",
    "shall i",
    "should i",
    "would it help",
    "would that help",
    "can i help",
    "may i",
    "do you need me to",
    "need me to",
    "would you prefer me to",
    "want a",
    "want an",
    "want to see",
    "want more",
    "would you be interested",
    "interested in",
    "shall we",
    "should we",
];

/// Words that make a proposal ask for more than was asked.
const EXTRA: &[&str] = &[
    "too",
    "also",
    "well",
    "more",
    "another",
    "further",
    "additional",
    "else",
    "other",
];

/// How a request for information opens (a sentence without '?').
const REQUESTS: &[&str] = &[
    "let me know",
    "please let me know",
    "tell me",
    "please tell me",
    "please specify",
    "please clarify",
    "please share",
    "please provide",
    "please confirm",
    "please describe",
    "please paste",
    "please send",
    "please post",
    "please give",
    "i need to know",
    "i'd need to know",
    "i would need to know",
    "i need more",
    "i'd need more",
];

/// Openings of a sentence that answers the question before it.
const ANSWER_OPENERS: &[&str] = &[
    "yes",
    "no",
    "yeah",
    "yep",
    "nope",
    "because",
    "sure",
    "absolutely",
    "definitely",
    "certainly",
    "indeed",
    "nothing",
    "nobody",
    "never",
    "not",
    "short",
];

/// Openings of the next sentence that answer a question without "you".
const PRONOUN_ANSWERS: &[&str] = &["it", "it's", "they", "they're"];

/// Words too common to tie an answer to its question.
const STOP: &[&str] = &[
    "the", "a", "an", "and", "or", "of", "to", "in", "on", "for", "with", "is", "are", "was",
    "were", "be", "it", "this", "that", "these", "those", "there", "what", "which", "who", "how",
    "why", "when", "where", "do", "does", "did", "can", "could", "should", "would", "will", "one",
    "so", "between", "about",
];

#[derive(Debug)]
struct Sentence {
    /// Prose with inline code and URLs masked; a code block's own text.
    text: String,
    words: usize,
    code: bool,
    question: bool,
    list_item: bool,
    /// The line that introduced the list this item is in ("Do you mean:").
    lead_in: Option<usize>,
    /// Words of all sentences before this one.
    before: usize,
    /// Whether a code block comes before this sentence.
    code_before: bool,
    /// Words of the non-question sentences after this one.
    after: usize,
}

/// The first sentence of `reply` that asks the user a clarifying question
/// (or requests information), with inline code and URLs masked; `phrases`
/// is the configured `clarifying` list.
pub fn clarifying_question(reply: &str, phrases: &[String]) -> Option<String> {
    let sentences = sentences(reply);
    (0..sentences.len())
        .find(|&i| asks(&sentences, i, phrases))
        .map(|i| sentences[i].text.trim().to_owned())
}

fn asks(s: &[Sentence], i: usize, phrases: &[String]) -> bool {
    let this = &s[i];
    if this.code {
        return false;
    }
    if !this.question {
        let words = lower_words(&this.text);
        return is_request(&words) && !answered(s, i, &words);
    }
    if CODE_MARKS.iter().any(|m| this.text.contains(m)) {
        return false;
    }
    let Some(body) = untagged(&this.text) else {
        return false;
    };
    let words = lower_words(body);
    let core = skip_connectors(&words);
    if rhetorical(core) || is_offer(s, i, core) || answered(s, i, &words) {
        return false;
    }
    let speaks = |t: &str| text::first_match(t, phrases).is_some() || addressed(t);
    speaks(body) || (this.list_item && this.lead_in.is_some_and(|l| speaks(&s[l].text)))
}

/// Lowercase words, typographic apostrophes made ASCII.
fn lower_words(s: &str) -> Vec<String> {
    let n = text::normalize(s);
    text::words(&n).map(str::to_owned).collect()
}

fn skip_connectors(words: &[String]) -> &[String] {
    let k = words
        .iter()
        .take_while(|w| CONNECTORS.contains(&w.as_str()))
        .count();
    &words[k..]
}

fn starts_with(words: &[String], phrase: &str) -> bool {
    let p: Vec<&str> = phrase.split(' ').collect();
    words.len() >= p.len() && words.iter().zip(&p).all(|(w, p)| w == p)
}

fn joined(words: &[String]) -> String {
    words.join(" ")
}

/// The question without a trailing tag (", right?", ", isn't it?"), or
/// `None` when the tag is all there is.
fn untagged(sentence: &str) -> Option<&str> {
    let Some(comma) = sentence.rfind(',') else {
        return Some(sentence);
    };
    if !TAGS.contains(&joined(&lower_words(&sentence[comma + 1..])).as_str()) {
        return Some(sentence);
    }
    let body = &sentence[..comma];
    body.chars().any(char::is_alphanumeric).then_some(body)
}

fn rhetorical(core: &[String]) -> bool {
    let all = joined(core);
    RHETORICAL.contains(&all.as_str())
        || RHETORICAL_PARTS.iter().any(|p| contains_words(&all, p))
        || core
            .first()
            .is_some_and(|w| NEGATIVE_OPENERS.contains(&w.as_str()))
}

/// Whether the word sequence `phrase` occurs in `words` (both joined with
/// single spaces).
fn contains_words(words: &str, phrase: &str) -> bool {
    format!(" {words} ").contains(&format!(" {phrase} "))
}

fn is_offer(s: &[Sentence], i: usize, core: &[String]) -> bool {
    let all = joined(core);
    if CLOSING_OFFERS.iter().any(|p| contains_words(&all, p)) {
        return true;
    }
    if !PROPOSALS.iter().any(|p| starts_with(core, p)) {
        return false;
    }
    s[i].code_before
        || s[i].before >= OFFER_AFTER
        || core.iter().any(|w| EXTRA.contains(&w.as_str()))
}

fn is_request(words: &[String]) -> bool {
    let core = skip_connectors(words);
    REQUESTS.iter().any(|r| {
        starts_with(core, r)
            && !matches!(
                core.get(r.split(' ').count()).map(String::as_str),
                Some("if" | "in" | "anything" | "any")
            )
    })
}

/// Whether the reply goes on to answer sentence `i` itself.
fn answered(s: &[Sentence], i: usize, words: &[String]) -> bool {
    if s[i].after > ANSWERED_AFTER {
        return true;
    }
    let Some(next) = s.get(i + 1) else {
        return false;
    };
    if next.code {
        return true;
    }
    if next.question {
        return false;
    }
    let next_words = lower_words(&next.text);
    let next_words = skip_connectors(&next_words);
    let Some(first) = next_words.first() else {
        return false;
    };
    if ANSWER_OPENERS.contains(&first.as_str()) {
        return true;
    }
    if words.iter().any(|w| SECOND_PERSON.contains(&w.as_str())) {
        return false;
    }
    if PRONOUN_ANSWERS.contains(&first.as_str()) {
        return true;
    }
    let subject = next_words
        .iter()
        .find(|w| !matches!(w.as_str(), "a" | "an" | "the"));
    subject.is_some_and(|w| !STOP.contains(&w.as_str()) && w.len() > 2 && words.contains(w))
}

/// Whether a question speaks to the user: "you", an interrogative opening
/// a clause and followed by more words, or a choice ("A or B?").
fn addressed(sentence: &str) -> bool {
    let words = lower_words(sentence);
    if words.iter().any(|w| SECOND_PERSON.contains(&w.as_str())) {
        return true;
    }
    let choice = words
        .iter()
        .enumerate()
        .any(|(k, w)| w == "or" && k > 0 && k + 1 < words.len());
    if choice {
        return true;
    }
    let n = text::normalize(sentence);
    n.split([',', ';', ':', '\u{2014}', '\u{2013}', '(', ')'])
        .flat_map(|c| c.split(" - "))
        .any(|clause| {
            let w: Vec<String> = text::words(clause).map(str::to_owned).collect();
            let w = skip_connectors(&w);
            w.len() >= 2
                && OPENERS.contains(&w[0].as_str())
                && !EMPTY_AFTER_OPENER.contains(&w[1].as_str())
        })
}

/// Splits `reply` into prose sentences and code blocks.
fn sentences(reply: &str) -> Vec<Sentence> {
    let mut b = Builder::default();
    let mut fence: Option<(char, usize)> = None;
    let mut code = String::new();
    let mut para = String::new();
    let mut para_list = false;
    for line in reply.lines() {
        let t = line.trim_start();
        if let Some((c, n)) = fence {
            let run = t.chars().take_while(|&x| x == c).count();
            if run >= n && t[run * c.len_utf8()..].trim().is_empty() {
                b.code(&code);
                code.clear();
                fence = None;
            } else {
                code.push_str(line);
                code.push('\n');
            }
            continue;
        }
        if let Some(f) = opens_fence(t) {
            b.prose(&para, para_list);
            para.clear();
            fence = Some(f);
            continue;
        }
        if t.trim().is_empty() {
            b.prose(&para, para_list);
            para.clear();
            continue;
        }
        let (body, item, starts_block) = strip_marker(t);
        if starts_block && !para.is_empty() {
            b.prose(&para, para_list);
            para.clear();
        }
        if para.is_empty() {
            para_list = item;
        } else {
            para.push(' ');
        }
        para.push_str(body.trim_end());
        let end = body.trim_end().trim_end_matches(['*', '_', '"', ')']);
        if end.ends_with(['.', '!', '?', ':']) {
            b.prose(&para, para_list);
            para.clear();
        }
    }
    b.prose(&para, para_list);
    if fence.is_some() {
        b.code(&code);
    }
    let mut out = b.out;
    let (mut before, mut code_before) = (0, false);
    for x in &mut out {
        (x.before, x.code_before) = (before, code_before);
        before += x.words;
        code_before |= x.code;
    }
    let mut after = 0;
    for x in out.iter_mut().rev() {
        x.after = after;
        if !x.question {
            after += x.words;
        }
    }
    out
}

/// The fence character and length when `line` opens a fenced code block.
fn opens_fence(line: &str) -> Option<(char, usize)> {
    let c = line.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let n = line.chars().take_while(|&x| x == c).count();
    (n >= 3 && !line[n..].contains('`')).then_some((c, n))
}

/// A line without its list, heading or quote marker; whether it is a list
/// item; whether it starts a new block.
fn strip_marker(line: &str) -> (&str, bool, bool) {
    let bullet = line
        .strip_prefix(['-', '*', '+', '\u{2022}'])
        .filter(|r| r.starts_with(' '));
    if let Some(rest) = bullet {
        return (rest.trim_start(), true, true);
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        let rest = &line[digits..];
        if let Some(r) = rest.strip_prefix(['.', ')']).filter(|r| r.starts_with(' ')) {
            return (r.trim_start(), true, true);
        }
    }
    if line.starts_with('#') {
        return (line.trim_start_matches('#').trim_start(), false, true);
    }
    if let Some(rest) = line.strip_prefix('>') {
        return (rest.trim_start(), false, false);
    }
    (line, false, false)
}

#[derive(Default)]
struct Builder {
    out: Vec<Sentence>,
    /// The last prose sentence outside a list, when it ends with ':'.
    lead_in: Option<usize>,
}

impl Builder {
    fn code(&mut self, code: &str) {
        self.out.push(Sentence {
            text: code.to_owned(),
            words: text::words(code).count(),
            code: true,
            question: false,
            list_item: false,
            lead_in: None,
            before: 0,
            code_before: false,
            after: 0,
        });
    }

    fn prose(&mut self, para: &str, list_item: bool) {
        let masked = mask_urls(&mask_inline_code(para));
        for (k, (sentence, question)) in split(&masked).into_iter().enumerate() {
            let sentence = sentence.trim();
            if !sentence.chars().any(char::is_alphanumeric) {
                continue;
            }
            let item = list_item && k == 0;
            if !list_item {
                let end = sentence.trim_end_matches(['*', '_', '"', ')']);
                self.lead_in = end.ends_with(':').then_some(self.out.len());
            }
            self.out.push(Sentence {
                text: sentence.to_owned(),
                words: text::words(sentence).count(),
                code: false,
                question,
                list_item: item,
                lead_in: if item { self.lead_in } else { None },
                before: 0,
                code_before: false,
                after: 0,
            });
        }
    }
}

/// `inline code` spans replaced with the word "code".
fn mask_inline_code(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('`') {
        out.push_str(&rest[..at]);
        let n = rest[at..].bytes().take_while(|&b| b == b'`').count();
        let body = &rest[at + n..];
        match closing_run(body, n) {
            Some(k) => {
                out.push_str("code");
                rest = &body[k + n..];
            }
            None => {
                out.push_str(&rest[at..at + n]);
                rest = body;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where the first run of exactly `n` backticks in `s` starts.
fn closing_run(s: &str, n: usize) -> Option<usize> {
    let b = s.as_bytes();
    let mut k = 0;
    while k < b.len() {
        if b[k] == b'`' {
            let start = k;
            while k < b.len() && b[k] == b'`' {
                k += 1;
            }
            if k - start == n {
                return Some(start);
            }
        } else {
            k += 1;
        }
    }
    None
}

/// URLs replaced with the word "url", their trailing punctuation kept.
fn mask_urls(s: &str) -> String {
    s.split_inclusive(char::is_whitespace)
        .map(|piece| {
            let token = piece.trim_end();
            let space = &piece[token.len()..];
            let lead = token.len() - token.trim_start_matches(['(', '<', '"', '\'']).len();
            let body = &token[lead..];
            let lower = body.to_ascii_lowercase();
            if !(lower.contains("://") || lower.starts_with("www.")) {
                return piece.to_owned();
            }
            let end = body.trim_end_matches(['.', ',', ';', ':', '!', '?', ')', '>', '"', '\'']);
            format!("{}url{}{space}", &token[..lead], &body[end.len()..])
        })
        .collect()
}

/// Sentences of one prose run, each with whether it ends in a question
/// mark.
fn split(s: &str) -> Vec<(String, bool)> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '.' | '!' | '?') {
            let mut j = i + 1;
            while j < chars.len() && CLOSERS.contains(&chars[j]) {
                j += 1;
            }
            let ends = j == chars.len() || chars[j].is_whitespace();
            // A '?' after a space, '=', '(', ',', '+'... is a placeholder,
            // an operator or a quantifier.
            let after_word = i > 0
                && (chars[i - 1].is_alphanumeric()
                    || matches!(
                        chars[i - 1],
                        ')' | ']' | '"' | '\'' | '\u{201d}' | '\u{2019}' | '*' | '_'
                    ));
            if ends && (c != '?' || after_word) {
                out.push((chars[start..j].iter().collect(), chars[i..j].contains(&'?')));
                start = j;
                i = j;
                continue;
            }
        }
        i += 1;
    }
    if start < chars.len() {
        out.push((chars[start..].iter().collect(), false));
    }
    out
}

#[cfg(test)]
mod labelled;

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn defaults() -> Vec<String> {
        crate::owned(crate::CLARIFYING)
    }

    fn asks_user(reply: &str) -> bool {
        clarifying_question(reply, &defaults()).is_some()
    }

    #[test]
    fn question_marks_in_code_sql_and_urls_end_nothing() {
        let s = split("SELECT a FROM t WHERE id = ? AND b = ?");
        assert_eq!(s.len(), 1);
        assert!(!s[0].1);
        assert!(!asks_user(
            "Write it as `x ? a : b`, or see https://x.io/a?b=1 today."
        ));
        assert!(!asks_user("let n = s.parse()?;\nThat works."));
        assert!(!asks_user(
            "```sql\nWhich rows? SELECT * FROM t WHERE id = ?\n```"
        ));
        assert_eq!(mask_inline_code("a `b` c ``d`e`` f"), "a code c code f");
        assert_eq!(mask_urls("see https://a.b/c?d=1? ok"), "see url? ok");
    }

    #[test]
    fn plain_questions_count_and_rhetorical_ones_do_not() {
        assert!(asks_user("Which one do you mean?"));
        assert!(asks_user("Python 2 or 3?"));
        assert!(asks_user("You're on Windows, right?"));
        assert!(!asks_user("Why not?"));
        assert!(!asks_user("It's fast, isn't it?"));
        assert!(!asks_user("Isn't that neat?"));
        assert!(!asks_user("Paris. Anything else?"));
    }

    #[test]
    fn odd_and_long_input_is_handled() {
        for odd in [
            "",
            "?",
            "`",
            "```",
            "- ?",
            "1.",
            "a?",
            "\u{e9}?\u{201d} x",
            ", right?",
            "``a` b",
        ] {
            let _ = asks_user(odd);
        }
        assert!(!asks_user(&"What is a cat? A cat is fine. ".repeat(5_000)));
    }

    #[test]
    fn a_configured_phrase_counts_in_a_question_only() {
        let phrases = vec!["pourriez-vous préciser".to_owned()];
        let q = "Pourriez-vous préciser la version?";
        assert!(clarifying_question(q, &phrases).is_some());
        assert!(clarifying_question(q, &defaults()).is_none());
        assert!(clarifying_question("Pourriez-vous préciser la version.", &phrases).is_none());
    }
}
