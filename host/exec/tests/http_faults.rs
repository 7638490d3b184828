//! The http executor against an endpoint that misbehaves on purpose: a
//! scripted server on loopback answers the probe normally, then each
//! completion request with the next scripted fault (a 500, a 400, a 401,
//! a body that is not JSON, an answer slower than the deadline, a
//! connection closed mid-response). Each must end in a retry or a typed
//! error naming the endpoint; none may panic. Real llama-server runs are
//! in host/cli/tests/http_llama_server.rs.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vauban_exec::executor::http::{HttpExecutor, HttpSpec};
use vauban_exec::executor::{Executor, ExecutorError, GenerateOptions, PromptForm, RunOptions};
use vauban_format::trace::{ArtifactKind as K, SupportLevel, TraceRequest};

/// What the server does with one completion request.
#[derive(Clone)]
enum Reply {
    Answer,
    AnswerWithoutLogprobs,
    Status(u16, &'static str),
    Body(&'static str),
    Slow(Duration),
    /// Headers promise a body the server never finishes.
    Truncated,
}

const ANSWER: &str = r#"{"choices":[{"text":" Paris","finish_reason":"length","logprobs":{"content":[
  {"id":7042,"token":" Paris","logprob":-0.25,"top_logprobs":[{"id":7042,"token":" Paris","logprob":-0.25},{"id":260,"token":" the","logprob":-2.5}]}]}}],
  "model":"m","system_fingerprint":"fp1","usage":{"prompt_tokens":5,"completion_tokens":1}}"#;
const PLAIN: &str =
    r#"{"choices":[{"text":" Paris","finish_reason":"length","logprobs":null}],"model":"m"}"#;

struct Scripted {
    url: String,
    /// Completion requests after the probe.
    hits: Arc<AtomicUsize>,
}

/// A server on a free loopback port: `GET /v1/models` lists `m`; the probe
/// (a one-token request) is answered with `probe`; every other completion
/// with the next scripted reply, then with an answer.
fn serve(probe: Reply, script: Vec<Reply>) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (script, hits, probe) = (script.clone(), counted.clone(), probe.clone());
            std::thread::spawn(move || handle(stream, &probe, &script, &hits));
        }
    });
    Scripted { url, hits }
}

fn handle(
    mut stream: TcpStream,
    probe: &Reply,
    script: &Mutex<VecDeque<Reply>>,
    hits: &AtomicUsize,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut length = 0;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let body = String::from_utf8_lossy(&body);
    let reply = if line.starts_with("GET /v1/models") {
        Reply::Body(r#"{"object":"list","data":[{"id":"m"}]}"#)
    } else if body.contains("\"max_tokens\":1,") && body.contains("\"Hello\"") {
        probe.clone()
    } else if body.contains("\"echo\":true") {
        // The probe's echo check: an answer without the prompt's logprobs.
        Reply::Answer
    } else {
        hits.fetch_add(1, Ordering::SeqCst);
        script.lock().unwrap().pop_front().unwrap_or(Reply::Answer)
    };
    let send = |s: &mut TcpStream, status: u16, body: &str| {
        let _ = write!(
            s,
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    };
    match reply {
        Reply::Answer => send(&mut stream, 200, ANSWER),
        Reply::AnswerWithoutLogprobs => send(&mut stream, 200, PLAIN),
        Reply::Status(code, msg) => send(
            &mut stream,
            code,
            &format!(r#"{{"error":{{"message":"{msg}"}}}}"#),
        ),
        Reply::Body(b) => send(&mut stream, 200, b),
        Reply::Slow(d) => {
            std::thread::sleep(d);
            send(&mut stream, 200, ANSWER);
        }
        Reply::Truncated => {
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\nconnection: close\r\n\r\n{{\"choices\":[{{\"te"
            );
        }
    }
}

fn spec(url: &str) -> HttpSpec {
    let mut s = HttpSpec::new(url, "m");
    s.retries = 2;
    s.backoff = Duration::from_millis(10);
    s.timeout = Duration::from_secs(20);
    s.concurrency = 1;
    s
}

fn request() -> (TraceRequest, RunOptions) {
    let request = TraceRequest {
        prompt_id: Some("q7".into()),
        category: None,
        expected_behavior: None,
        text: Some("The capital of France is".into()),
        token_ids: None,
        observe: vec![K::Text, K::Tokens, K::Logprobs, K::Logits, K::Profile],
        layers: vec![],
        raw_tensors: false,
        raw_kinds: Vec::new(),
    };
    let options = RunOptions {
        trace_id: "q7".into(),
        prompt: PromptForm::Raw,
        interventions: vec![],
        block_outputs: false,
        generate: GenerateOptions {
            max_tokens: 4,
            sampling: None,
            stop: vec![],
            top_logprobs: 5,
        },
        reference: None,
    };
    (request, options)
}

/// The error of a run that must fail.
fn failure(s: HttpSpec) -> String {
    match trace(s) {
        Ok(out) => panic!("traced {} where an error was due", out.trace.id),
        Err(e) => e,
    }
}

/// Connects (the probe) and traces one request.
fn trace(s: HttpSpec) -> Result<vauban_exec::executor::TraceOutput, String> {
    let exec = HttpExecutor::connect(&s).map_err(|e| format!("connect: {e}"))?;
    let (r, o) = request();
    exec.trace(&r, &o, None).map_err(|e| e.to_string())
}

#[test]
fn a_500_then_success_is_retried_and_the_trace_says_how_often() {
    let s = serve(Reply::Answer, vec![Reply::Status(500, "overloaded")]);
    let out = trace(spec(&s.url)).unwrap();
    assert_eq!(s.hits.load(Ordering::SeqCst), 2);
    let span = &out.trace.spans[0];
    assert_eq!(span.profile.notes["attempts"], "2");
    assert!(span.profile.notes["request_body"].contains("\"seed\":0"));
    // What the server gave is recorded; logits it never gives are unsupported.
    assert!(out.trace.has(K::Logprobs) && out.trace.has(K::Tokens));
    assert!(out.trace.unsupported.contains(&K::Logits));
}

#[test]
fn a_500_on_every_attempt_is_a_typed_error_after_the_retries() {
    let s = serve(Reply::Answer, vec![Reply::Status(503, "down"); 3]);
    let e = failure(spec(&s.url));
    assert_eq!(s.hits.load(Ordering::SeqCst), 3, "1 attempt + 2 retries");
    assert!(
        e.contains("failed (503) on each of 3 attempt(s)") && e.contains("down"),
        "{e}"
    );
    assert!(e.contains(&s.url), "names the endpoint: {e}");
}

#[test]
fn a_400_is_not_retried_and_carries_the_servers_message() {
    let s = serve(Reply::Answer, vec![Reply::Status(400, "prompt too long")]);
    let e = failure(spec(&s.url));
    assert_eq!(s.hits.load(Ordering::SeqCst), 1);
    assert!(
        e.contains("rejected the request (400): prompt too long"),
        "{e}"
    );
}

#[test]
fn a_401_names_the_key_variable_never_the_key() {
    // SAFETY: a variable only this test reads.
    unsafe { std::env::set_var("VAUBAN_FAULT_TEST_KEY", "sk-fault-secret-42") };
    let s = serve(Reply::Answer, vec![Reply::Status(401, "invalid api key")]);
    let mut sp = spec(&s.url);
    sp.api_key_env = Some("VAUBAN_FAULT_TEST_KEY".into());
    let e = failure(sp);
    assert!(
        e.contains("$VAUBAN_FAULT_TEST_KEY") && e.contains("invalid api key"),
        "{e}"
    );
    assert!(!e.contains("sk-fault-secret-42"));
}

#[test]
fn a_body_that_is_not_json_or_is_cut_short_is_an_error_not_a_trace() {
    let s = serve(
        Reply::Answer,
        vec![Reply::Body("<html>502 Bad Gateway</html>")],
    );
    let e = failure(spec(&s.url));
    assert!(e.contains("cannot read") && e.contains("not JSON"), "{e}");
    // A body cut short is a transport failure: retried, then an error.
    let s = serve(Reply::Answer, vec![Reply::Truncated; 3]);
    let e = failure(spec(&s.url));
    assert_eq!(s.hits.load(Ordering::SeqCst), 3, "{e}");
}

#[test]
fn an_answer_slower_than_the_deadline_times_out_after_the_retries() {
    let s = serve(Reply::Answer, vec![Reply::Slow(Duration::from_secs(3)); 2]);
    let mut sp = spec(&s.url);
    sp.timeout = Duration::from_millis(300);
    sp.retries = 1;
    let e = failure(sp);
    assert!(
        e.contains("did not answer within 0.3 s (2 attempt(s))"),
        "{e}"
    );
}

#[test]
fn a_refused_connection_says_where_and_what_to_check() {
    // A port that was free a moment ago: nothing listens on it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut sp = spec(&format!("http://127.0.0.1:{port}/v1"));
    sp.retries = 1;
    let e = match HttpExecutor::connect(&sp) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("connected to a closed port"),
    };
    assert!(
        e.contains("cannot connect to") && e.contains(&port.to_string()),
        "{e}"
    );
    assert!(e.contains("is the server running"), "{e}");
}

#[test]
fn a_model_the_server_does_not_serve_is_refused_with_the_list() {
    let s = serve(Reply::Answer, vec![]);
    let mut sp = spec(&s.url);
    sp.model = "gpt-9".into();
    let e = HttpExecutor::connect(&sp).err().unwrap().to_string();
    assert!(
        e.contains("does not serve `gpt-9`") && e.contains("`m`"),
        "{e}"
    );
}

#[test]
fn an_endpoint_without_logprobs_declares_them_unsupported_and_the_trace_says_so() {
    let s = serve(
        Reply::AnswerWithoutLogprobs,
        vec![Reply::AnswerWithoutLogprobs],
    );
    let exec = HttpExecutor::connect(&spec(&s.url)).unwrap();
    assert_eq!(exec.probe().top_logprobs, 0);
    assert_eq!(
        exec.capabilities().support(K::Logprobs),
        SupportLevel::Unsupported
    );
    let (r, o) = request();
    let out = exec.trace(&r, &o, None).unwrap();
    assert!(!out.trace.has(K::Logprobs));
    assert!(out.trace.unsupported.contains(&K::Logprobs));
    assert!(
        !out.trace.has(K::Tokens),
        "no ids were given, none are made up"
    );
    // The request did not ask for logprobs the endpoint cannot give.
    assert!(!out.trace.spans[0].profile.notes["request_body"].contains("logprobs"));
}

#[test]
fn interventions_and_token_ids_are_refused_by_name() {
    let s = serve(Reply::Answer, vec![]);
    let exec = HttpExecutor::connect(&spec(&s.url)).unwrap();
    let (mut r, o) = request();
    r.text = None;
    r.token_ids = Some(vec![1, 2]);
    match exec.trace(&r, &o, None) {
        Err(ExecutorError::Unsupported {
            backend: "http",
            what,
        }) => {
            assert!(what.contains("token ids"))
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert_eq!(s.hits.load(Ordering::SeqCst), 0, "nothing was sent");
}

#[test]
fn answers_are_kept_and_a_second_run_asks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(Reply::Answer, vec![]);
    let mut sp = spec(&s.url);
    sp.cache = Some(dir.path().to_path_buf());
    let first = trace(sp.clone()).unwrap();
    let second = trace(sp).unwrap();
    assert_eq!(s.hits.load(Ordering::SeqCst), 1);
    assert_eq!(second.trace.spans[0].profile.notes["attempts"], "1");
    assert!(second.trace.spans[0].profile.notes["timing"].contains("response cache"));
    assert_eq!(
        first.trace.artifacts.len(),
        second.trace.artifacts.len(),
        "the same evidence from the cache"
    );
}

#[test]
fn the_rate_limit_spaces_requests_apart() {
    let s = serve(Reply::Answer, vec![]);
    let mut sp = spec(&s.url);
    sp.concurrency = 4;
    sp.requests_per_second = Some(20.0);
    let exec = HttpExecutor::connect(&sp).unwrap();
    let jobs = vec![request(); 6];
    let start = std::time::Instant::now();
    let mut done = 0;
    exec.trace_all(&jobs, 1, &mut |_, r| {
        r.unwrap();
        done += 1;
        std::ops::ControlFlow::Continue(())
    });
    assert_eq!(done, 6);
    // Six starts at 20 per second span at least 5 intervals of 50 ms
    // (the probe's own requests came first); a bound from below only.
    assert!(
        start.elapsed() >= Duration::from_millis(250),
        "{:?}",
        start.elapsed()
    );
}
