//! A model's own chat template, rendered as Hugging Face's
//! `apply_chat_template` renders it.
//!
//! The prompt a model saw is part of the evidence: one stray newline changes
//! the tokens. So the template runs in a minijinja environment set up like
//! transformers' `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True)` with the loop-controls extension, the same globals
//! (`raise_exception`, `strftime_now`), HF's `tojson` and the same render
//! context (`messages`, `add_generation_prompt`, `tools = None`,
//! `documents = None`, the special tokens that are set).
//!
//! Printed values read as Python prints them (`None`, `True`, `['a']`); the
//! same values turned to text by `| string`, `~` or `join` still read as
//! minijinja writes them (`none`, `true`, `["a"]`).

use std::borrow::Cow;
use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use serde::Serialize;

/// The one template name in a [`ChatTemplate`]'s environment.
const NAME: &str = "chat_template";

/// A chat template that cannot be read, compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("chat template does not compile: {}: {message}", at(*line))]
    Syntax {
        line: Option<usize>,
        message: String,
    },
    #[error("chat template failed to render at {}: {message}", at(*line))]
    Render {
        line: Option<usize>,
        message: String,
    },
    /// The template called `raise_exception`: it refuses these messages
    /// (roles that do not alternate, a system message it does not support).
    #[error("chat template refused the conversation ({}): {message}", at(*line))]
    Refused {
        line: Option<usize>,
        message: String,
    },
    #[error("tokenizer_config.json `chat_template` {0}")]
    Config(String),
}

fn at(line: Option<usize>) -> String {
    line.map_or_else(|| "an unknown line".to_owned(), |l| format!("line {l}"))
}

/// One chat turn, as `apply_chat_template` takes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template with the special tokens it may reference.
pub struct ChatTemplate {
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// What `raise_exception` carries out of minijinja, so that [`ChatTemplate::render`]
/// can tell the template's own refusal from an engine error.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

impl ChatTemplate {
    /// `source`: the Jinja text (from GGUF `tokenizer.chat_template` or
    /// tokenizer_config.json's `chat_template`); `bos`/`eos`: the token
    /// strings the template may reference as `bos_token` / `eos_token`
    /// (left undefined when `None`, as HF leaves unset special tokens).
    /// Compile errors name the template line.
    pub fn new(
        source: impl Into<String>,
        bos: Option<String>,
        eos: Option<String>,
    ) -> Result<Self, ChatError> {
        let source = source.into();
        let mut env = Environment::new();
        // Jinja2's defaults are minijinja's for everything else (no
        // autoescape for a name without an extension, lenient undefined,
        // and a single trailing newline dropped: keep_trailing_newline =
        // false); these two are what HF turns on.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, for_minijinja(&source))
            .map_err(|e| ChatError::Syntax {
                line: e.line(),
                message: describe(&e),
            })?;
        Ok(Self {
            source,
            bos_token: bos,
            eos_token: eos,
            env,
        })
    }

    /// Renders `messages` with `add_generation_prompt` (the assistant header
    /// that asks the model to answer).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let mut ctx = vec![
            ("messages", Value::from_serialize(messages)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            // HF passes these as None when absent; left undefined,
            // `tools is not none` would be true.
            ("tools", Value::from(())),
            ("documents", Value::from(())),
        ];
        for (name, token) in [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
        ] {
            if let Some(token) = token {
                ctx.push((name, Value::from(token.as_str())));
            }
        }
        let ctx: Value = ctx.into_iter().collect();
        let render = |e: Error| {
            let raised = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<Raised>());
            match raised {
                Some(Raised(message)) => ChatError::Refused {
                    line: e.line(),
                    message: message.clone(),
                },
                None => ChatError::Render {
                    line: e.line(),
                    message: describe(&e),
                },
            }
        };
        self.env
            .get_template(NAME)
            .and_then(|t| t.render(ctx))
            .map_err(render)
    }

    /// The template text as given (before any rewriting for minijinja).
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }
}

/// tokenizer_config.json's `chat_template` is a string, or a list of
/// `{name, template}` from which `apply_chat_template` uses "default"; a
/// missing one is `Ok(None)` (the model has no template of its own).
pub fn template_from_tokenizer_config(
    json: &serde_json::Value,
) -> Result<Option<String>, ChatError> {
    let bad = |m: String| ChatError::Config(m);
    match json.get("chat_template") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(serde_json::Value::Array(list)) => {
            for entry in list {
                let name = entry.get("name").and_then(|n| n.as_str());
                let template = entry.get("template").and_then(|t| t.as_str());
                match (name, template) {
                    (Some("default"), Some(t)) => return Ok(Some(t.to_owned())),
                    (Some(_), Some(_)) => {}
                    _ => {
                        return Err(bad(format!(
                            "has a list entry that is not {{\"name\": string, \"template\": string}}: {entry}"
                        )));
                    }
                }
            }
            let names: Vec<&str> = list
                .iter()
                .filter_map(|e| e.get("name").and_then(|n| n.as_str()))
                .collect();
            Err(bad(format!(
                "is a list of named templates without \"default\" (names: {names:?})"
            )))
        }
        Some(other) => Err(bad(format!(
            "is neither a string nor a list of named templates: {other}"
        ))),
    }
}

fn describe(e: &Error) -> String {
    match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    }
}

/// What Python's `str()` prints for what a template outputs: `None`,
/// `True`, `1e+20`, `['a', None]`, where minijinja prints `none`, `true`,
/// `100000000000000000000.0`, `["a", none]`. Strings, undefined and other
/// objects print as minijinja prints them.
fn python_formatter(
    out: &mut minijinja::Output,
    state: &minijinja::State,
    value: &Value,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number | ValueKind::Seq | ValueKind::Map => {
            let mut text = String::new();
            python_repr(value, &mut text);
            Ok(out.write_str(&text)?)
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// Python's `repr()`, which `str()` of a list or dict applies to its items.
fn python_repr(value: &Value, out: &mut String) {
    let items = |out: &mut String, open, close, map: bool| {
        out.push(open);
        for (i, item) in value.try_iter().into_iter().flatten().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            python_repr(&item, out);
            if map {
                out.push_str(": ");
                python_repr(&value.get_item(&item).unwrap_or_default(), out);
            }
        }
        out.push(close);
    };
    match value.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number if !value.is_integer() => match f64::try_from(value.clone()) {
            Ok(x) => python_float(x, out),
            Err(_) => write_display(value, out),
        },
        ValueKind::String => python_str_repr(value.as_str().unwrap_or_default(), out),
        ValueKind::Seq => items(out, '[', ']', false),
        ValueKind::Map => items(out, '{', '}', true),
        _ => write_display(value, out),
    }
}

fn write_display(value: &Value, out: &mut String) {
    // Writing to a String cannot fail.
    let _ = write!(out, "{value}");
}

/// `repr(float)`: the shortest round-trip digits, positional for exponents
/// in [-4, 16), else `1.5e+20`.
fn python_float(x: f64, out: &mut String) {
    if x.is_nan() {
        return out.push_str("nan");
    }
    if x.is_infinite() {
        return out.push_str(if x < 0.0 { "-inf" } else { "inf" });
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let fixed = x.to_string();
        out.push_str(&fixed);
        if !fixed.contains('.') {
            out.push_str(".0");
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "{mantissa}e{sign}{:02}", exp.unsigned_abs());
    }
}

/// `repr(str)`: single quotes unless only double quotes avoid escaping;
/// control characters escaped (Python also escapes other non-printable
/// Unicode, such as U+200B, which this leaves as is).
fn python_str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if c < ' ' || ('\u{7f}'..='\u{a0}').contains(&c) || c == '\u{ad}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// Local time, as Python's `datetime.now().strftime(format)`; a render that
/// calls this depends on the clock.
fn strftime_now(format: String) -> Result<String, Error> {
    let mut out = String::new();
    // chrono reports a bad specifier as a formatting error (to_string would panic).
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format string {format:?}"),
        )
    })?;
    Ok(out)
}

/// HF replaces Jinja's `tojson` with `json.dumps(x, ensure_ascii=False,
/// indent=None, separators=None, sort_keys=False)`: no HTML escaping and
/// Python's separators (`, ` and `: `). minijinja's own `tojson` escapes
/// `<>&'` and writes compact JSON, which would change the prompt.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let invalid = |m: String| Error::new(ErrorKind::InvalidOperation, format!("tojson: {m}"));
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                let n = i64::try_from(v.clone()).map_err(|_| {
                    invalid(format!("indent must be an integer or a string, not {v}"))
                })?;
                Some(" ".repeat(usize::try_from(n).unwrap_or(0)))
            }
        },
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                    a.as_str().unwrap_or_default().to_owned(),
                    b.as_str().unwrap_or_default().to_owned(),
                ),
                _ => return Err(invalid(format!("separators must be two strings, not {v}"))),
            }
        }
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let formatter = PyJson {
        item_sep,
        key_sep,
        indent,
        ensure_ascii,
        level: 0,
        has_value: false,
    };
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    Json { value, sort_keys }
        .serialize(&mut ser)
        .map_err(|e| invalid(format!("cannot serialize {value}: {e}")))?;
    let text = String::from_utf8(out).map_err(|e| invalid(e.to_string()))?;
    Ok(Value::from_safe_string(text))
}

/// A value serialised with Python's `sort_keys` applied on request.
struct Json<'a> {
    value: &'a Value,
    sort_keys: bool,
}

impl Serialize for Json<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap, SerializeSeq};
        if !self.sort_keys {
            return self.value.serialize(s);
        }
        fn wrap(value: &Value) -> Json<'_> {
            Json {
                value,
                sort_keys: true,
            }
        }
        match self.value.kind() {
            ValueKind::Map => {
                let mut keys: Vec<Value> =
                    self.value.try_iter().map_err(S::Error::custom)?.collect();
                keys.sort();
                let mut map = s.serialize_map(Some(keys.len()))?;
                for key in &keys {
                    let item = self.value.get_item(key).map_err(S::Error::custom)?;
                    map.serialize_entry(key, &wrap(&item))?;
                }
                map.end()
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = self.value.try_iter().map_err(S::Error::custom)?.collect();
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in &items {
                    seq.serialize_element(&wrap(item))?;
                }
                seq.end()
            }
            _ => self.value.serialize(s),
        }
    }
}

/// serde_json output laid out as Python's `json.dumps`.
struct PyJson {
    item_sep: String,
    key_sep: String,
    indent: Option<String>,
    ensure_ascii: bool,
    level: usize,
    has_value: bool,
}

impl PyJson {
    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        w.write_all(bracket)
    }

    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(self.item_sep.as_bytes())?;
        }
        self.newline(w)
    }

    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(indent) = &self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.level {
                w.write_all(indent.as_bytes())?;
            }
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for PyJson {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(self.key_sep.as_bytes())
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        if !self.ensure_ascii || fragment.is_ascii() {
            return w.write_all(fragment.as_bytes());
        }
        for c in fragment.chars() {
            if c.is_ascii() {
                w.write_all(&[c as u8])?;
            } else {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    write!(w, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }
}

/// The source as Python Jinja lexes it, in the two places minijinja differs.
fn for_minijinja(source: &str) -> String {
    // Jinja's lexer rewrites `\r\n` and `\r` to `\n` everywhere, string
    // literals included, before anything else; minijinja keeps them.
    let source = if source.contains('\r') {
        Cow::Owned(source.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        Cow::Borrowed(source)
    };
    without_generation_tags(&source).into_owned()
}

/// HF's `{% generation %}…{% endgeneration %}` (its AssistantTracker
/// extension) only marks assistant spans and renders its body unchanged.
/// minijinja has no such tag, so it becomes `{% if true %}…{% endif %}`,
/// which keeps the whitespace control and the line numbers.
fn without_generation_tags(source: &str) -> Cow<'_, str> {
    if !source.contains("generation") {
        return Cow::Borrowed(source);
    }
    let ws: &[char] = &[' ', '\t', '\n', '\r'];
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    'tags: while let Some(at) = rest.find("{%") {
        let mut open = at + 2;
        if rest[open..].starts_with(['-', '+']) {
            open += 1;
        }
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        let word = rest.trim_start_matches(ws);
        let lead = &rest[..rest.len() - word.len()];
        for (tag, replacement) in [("endgeneration", "endif"), ("generation", "if true")] {
            if let Some(after) = word.strip_prefix(tag) {
                let close = after.trim_start_matches(ws);
                let close = close.strip_prefix(['-', '+']).unwrap_or(close);
                if close.starts_with("%}") {
                    out.push_str(lead);
                    out.push_str(replacement);
                    rest = after;
                    continue 'tags;
                }
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    fn user(content: &str) -> Message {
        Message::new("user", content)
    }

    #[test]
    fn smollm2_adds_its_default_system_prompt() {
        let t = ChatTemplate::new(SMOLLM2, None, None).unwrap();
        assert_eq!(t.source(), SMOLLM2);
        let messages = [user("What is the capital of France?")];
        assert_eq!(
            t.render(&messages, true).unwrap(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            t.render(&messages, false).unwrap(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        );
    }

    #[test]
    fn smollm2_keeps_an_explicit_system_prompt() {
        let t = ChatTemplate::new(SMOLLM2, None, None).unwrap();
        let messages = [
            Message::new("system", "Answer in one word."),
            user("What is the capital of France?"),
            Message::new("assistant", "Paris."),
        ];
        assert_eq!(
            t.render(&messages, false).unwrap(),
            "<|im_start|>system\nAnswer in one word.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>\n"
        );
    }

    /// The shape of Llama 3's template: bos_token, `| trim`, loop.index0 and
    /// `{%- -%}` whitespace control over a multi-line source.
    #[test]
    fn llama3_style() {
        let src = "{% set loop_messages = messages %}\n{% for message in loop_messages %}\n    {%- set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' -%}\n    {%- if loop.index0 == 0 -%}\n        {%- set content = bos_token + content -%}\n    {%- endif -%}\n    {{- content -}}\n{% endfor %}\n{%- if add_generation_prompt -%}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n{%- endif -%}\n";
        let t = ChatTemplate::new(
            src,
            Some("<|begin_of_text|>".into()),
            Some("<|eot_id|>".into()),
        )
        .unwrap();
        let messages = [Message::new("system", "  Be brief.\n"), user("Hi there ")];
        assert_eq!(
            t.render(&messages, true).unwrap(),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    /// Qwen-style: Python string methods through pycompat, trim_blocks and
    /// lstrip_blocks over indented block tags, and a trailing newline dropped.
    #[test]
    fn qwen2_style_python_methods() {
        let src = "{% for message in messages %}\n    {% if loop.first and not messages[0].content.startswith('SYSTEM:') %}\n<|im_start|>system\nYou are Qwen.<|im_end|>\n    {% endif %}\n    {% if message.role == 'assistant' %}\n<|im_start|>assistant\n{{ message.content.split('</think>')[-1].lstrip('\\n').strip() }}<|im_end|>\n    {% else %}\n<|im_start|>{{ message.role }}\n{{ message.content.strip() }}<|im_end|>\n    {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}\n<|im_start|>assistant\n{% endif %}\n";
        let t = ChatTemplate::new(src, None, Some("<|im_end|>".into())).unwrap();
        let messages = [
            user("  2+2? "),
            Message::new("assistant", "<think>easy</think>\n\n4 "),
        ];
        assert_eq!(
            t.render(&messages, true).unwrap(),
            "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn raise_exception_refuses_with_the_templates_message() {
        let src = "{% for message in messages %}\n{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n{% endif %}\n{{ message['content'] }}\n{% endfor %}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        assert_eq!(t.render(&[user("a")], false).unwrap(), "a\n");
        let err = t.render(&[user("a"), user("b")], false).unwrap_err();
        match &err {
            ChatError::Refused { line, message } => {
                assert_eq!(*line, Some(3));
                assert_eq!(
                    message,
                    "Conversation roles must alternate user/assistant/user/assistant/..."
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let shown = err.to_string();
        assert!(shown.contains("line 3"), "{shown}");
        assert!(
            shown.contains("Conversation roles must alternate"),
            "{shown}"
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = ChatTemplate::new(
            "{% for m in messages %}\n{{ m.content }}\n{% if %}\n{% endfor %}",
            None,
            None,
        )
        .unwrap_err();
        assert!(
            matches!(err, ChatError::Syntax { line: Some(3), .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("line 3"), "{err}");
    }

    #[test]
    fn render_errors_name_the_line_and_the_message() {
        let t =
            ChatTemplate::new("ok\n{{ messages[0].content.nosuchmethod() }}", None, None).unwrap();
        let err = t.render(&[user("x")], false).unwrap_err();
        assert!(
            matches!(err, ChatError::Render { line: Some(2), .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("nosuchmethod"), "{err}");
    }

    #[test]
    fn python_printing_of_none_and_booleans() {
        let t = ChatTemplate::new(
            "{{ tools }} {{ documents }} {{ add_generation_prompt }} {{ nothing }}|{{ tools is none }}",
            None,
            None,
        )
        .unwrap();
        assert_eq!(t.render(&[], true).unwrap(), "None None True |True");
        let t = ChatTemplate::new(
            "{{ messages[0] }}|{{ ['a', none, false, 2, 1.5, 1e20, 1e-5, 0.1 + 0.2] }}|{{ {\"it's\": 'a\\\\b\\n\\x01'} }}|{{ 4 / 2 }}",
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            t.render(&[user("hi")], false).unwrap(),
            "{'role': 'user', 'content': 'hi'}|['a', None, False, 2, 1.5, 1e+20, 1e-05, 0.30000000000000004]|{\"it's\": 'a\\\\b\\n\\x01'}|2.0"
        );
    }

    #[test]
    fn unset_special_tokens_are_undefined() {
        let src = "{% if bos_token is defined %}{{ bos_token }}{% endif %}[{{ eos_token }}]";
        let t = ChatTemplate::new(src, None, None).unwrap();
        assert_eq!(t.render(&[], false).unwrap(), "[]");
        let t = ChatTemplate::new(src, Some("<s>".into()), Some("</s>".into())).unwrap();
        assert_eq!(t.render(&[], false).unwrap(), "<s>[</s>]");
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let t = ChatTemplate::new(
            "{{ messages[0] | tojson }}\n{{ messages | tojson(indent=2) }}\n{{ {'b': 1, 'a': [true, none, 1.5]} | tojson(sort_keys=true, separators=(',', ':')) }}\n{{ 'é<&>' | tojson(ensure_ascii=true) }}",
            None,
            None,
        )
        .unwrap();
        let messages = [Message::new("user", "<b>'é'</b> & \"q\"")];
        assert_eq!(
            t.render(&messages, false).unwrap(),
            "{\"role\": \"user\", \"content\": \"<b>'é'</b> & \\\"q\\\"\"}\n[\n  {\n    \"role\": \"user\",\n    \"content\": \"<b>'é'</b> & \\\"q\\\"\"\n  }\n]\n{\"a\":[true,null,1.5],\"b\":1}\n\"\\u00e9<&>\""
        );
    }

    #[test]
    fn loop_controls_and_generation_tags() {
        let src = "{% for m in messages %}{% if loop.index0 == 1 %}{% continue %}{% endif %}{% if m.role == 'stop' %}{% break %}{% endif %}{%- generation -%} {{ m.content }} {%- endgeneration %}|{% endfor %}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        let messages = [
            user("a"),
            user("skipped"),
            user("c"),
            Message::new("stop", "x"),
            user("d"),
        ];
        assert_eq!(t.render(&messages, false).unwrap(), "a|c|");
        assert_eq!(t.source(), src);
    }

    /// A template saved with Windows line endings renders with `\n`, as
    /// Jinja normalises them, in text and in string literals alike; an
    /// escaped `\r` stays.
    #[test]
    fn carriage_returns_are_normalised_as_jinja_does() {
        let src = "{% for m in messages %}\r\n<{{ m.role }}>\r{{ m.content + '\r\n' + '\\r' }}\r\n{% endfor %}\r\n";
        let t = ChatTemplate::new(src, None, None).unwrap();
        assert_eq!(t.render(&[user("x")], false).unwrap(), "<user>\nx\n\r\n");
        assert_eq!(t.source(), src);
    }

    #[test]
    fn strftime_now_formats_the_local_date() {
        let t = ChatTemplate::new("{{ strftime_now('%Y') }}", None, None).unwrap();
        let year = t.render(&[], false).unwrap();
        assert_eq!(year, chrono::Local::now().format("%Y").to_string());
        let t = ChatTemplate::new("{{ strftime_now('%Q') }}", None, None).unwrap();
        assert!(
            t.render(&[], false)
                .unwrap_err()
                .to_string()
                .contains("strftime_now")
        );
    }

    #[test]
    fn tokenizer_config_string_list_and_missing() {
        let cfg = serde_json::json!({ "chat_template": "{{ x }}" });
        assert_eq!(
            template_from_tokenizer_config(&cfg).unwrap().as_deref(),
            Some("{{ x }}")
        );
        let cfg = serde_json::json!({ "chat_template": [
            { "name": "tool_use", "template": "T" },
            { "name": "default", "template": "D" },
        ] });
        assert_eq!(
            template_from_tokenizer_config(&cfg).unwrap().as_deref(),
            Some("D")
        );
        let cfg = serde_json::json!({ "bos_token": "<s>" });
        assert_eq!(template_from_tokenizer_config(&cfg).unwrap(), None);
        let cfg = serde_json::json!({ "chat_template": [{ "name": "rag", "template": "R" }] });
        let err = template_from_tokenizer_config(&cfg).unwrap_err();
        assert!(err.to_string().contains("\"rag\""), "{err}");
        let cfg = serde_json::json!({ "chat_template": 3 });
        assert!(template_from_tokenizer_config(&cfg).is_err());
    }
}
