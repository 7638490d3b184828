//! A scorer that misbehaves in the way its config names, for the sandbox
//! tests: `{"attack": "loop" | "memory" | "huge_result" | "read_file" |
//! "read_data" | "env" | "panic" | "stack" | "nan" | "flood" | "unknown_metric" |
//! "chatty" | "clock" | "sleep" | "sleep_in_configure" | "random_huge" |
//! "read_fifo" | "ansi" | "none"}`.

use std::sync::OnceLock;

use serde::Deserialize;
use vauban_plugin_sdk::config;
use vauban_plugin_sdk::scorer::{
    self, ArtifactKind, Guest, Metric, PluginError, Polarity, ScorerInfo, TraceView,
};

#[derive(Deserialize)]
struct Config {
    /// `none` when not given (so `plugin inspect` can describe it).
    #[serde(default)]
    attack: String,
}

static ATTACK: OnceLock<String> = OnceLock::new();

#[inline(never)]
#[allow(unconditional_recursion)] // the point: exhaust the stack
fn recurse(n: u64, sink: &mut [u64; 64]) -> u64 {
    sink[(n % 64) as usize] = n;
    let mut local = [n; 64];
    local[(n % 7) as usize] = recurse(n + 1, sink);
    std::hint::black_box(local.iter().sum())
}

struct Evil;

impl Guest for Evil {
    fn describe() -> ScorerInfo {
        ScorerInfo {
            plugin: vauban_plugin_sdk::plugin_info!(
                "Adversarial: misbehaves on purpose\x1b[8m (and hides the rest of the line)"
            ),
            needs: vec![ArtifactKind::Text],
            metrics: vec![scorer::spec(
                "value",
                "count",
                Polarity::Neutral,
                "test",
                "whatever the attack reports",
            )],
        }
    }

    fn configure(config_json: String) -> Result<(), PluginError> {
        let c: Config = config::parse(&config_json).map_err(PluginError::BadConfig)?;
        if c.attack == "sleep_in_configure" {
            std::thread::sleep(std::time::Duration::from_secs(30));
        }
        ATTACK
            .set(c.attack)
            .map_err(|_| PluginError::BadConfig("twice".into()))
    }

    fn score(traces: Vec<TraceView>) -> Result<Vec<Metric>, PluginError> {
        let t = &traces[0];
        let attack = ATTACK.get().map(String::as_str).unwrap_or("none");
        match attack {
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "huge_result" => {
                // A 1 GB metric name.
                let name = "x".repeat(1 << 30);
                Ok(vec![Metric {
                    trace_id: t.id.clone(),
                    name,
                    value: 1.0,
                }])
            }
            "read_file" => match std::fs::read_to_string("/etc/passwd") {
                Ok(s) => Err(PluginError::Failed(format!("read /etc/passwd: {s}"))),
                Err(e) => Err(PluginError::Failed(format!(
                    "could not read /etc/passwd: {e}"
                ))),
            },
            "read_data" => {
                // A granted directory is mounted read-only at /data.
                if std::fs::write("/data/written.txt", b"x").is_ok() {
                    return Err(PluginError::Failed("wrote into /data".into()));
                }
                let n = std::fs::read("/data/input.txt")
                    .map_err(|e| {
                        PluginError::Failed(format!("could not read /data/input.txt: {e}"))
                    })?
                    .len();
                Ok(vec![scorer::metric(t, "value", n as f64)])
            }
            "env" => {
                let n = std::env::vars().count() + std::env::args().count();
                Ok(vec![scorer::metric(t, "value", n as f64)])
            }
            "clock" => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                Ok(vec![scorer::metric(t, "value", now as f64)])
            }
            "sleep" => {
                // A WASI monotonic-clock wait: the host must not serve it by
                // sleeping. Reports the seconds the plugin saw pass.
                let start = std::time::Instant::now();
                std::thread::sleep(std::time::Duration::from_secs(30));
                let seen = start.elapsed().as_secs_f64();
                Ok(vec![scorer::metric(t, "value", seen)])
            }
            #[cfg(target_arch = "wasm32")]
            "random_huge" => {
                // One request for 512 MiB of random bytes.
                let bytes = wasip2::random::random::get_random_bytes(512 << 20);
                Ok(vec![scorer::metric(t, "value", bytes.len() as f64)])
            }
            "read_fifo" => {
                let n = std::fs::read("/data/fifo")
                    .map_err(|e| PluginError::Failed(format!("could not read /data/fifo: {e}")))?
                    .len();
                Ok(vec![scorer::metric(t, "value", n as f64)])
            }
            "ansi" => {
                // Terminal control sequences: write the clipboard (OSC 52),
                // set the title, clear the screen, overwrite the line.
                eprintln!("\x1b]52;c;ZXZpbA==\x07 from stderr");
                Err(PluginError::Failed(
                    "\x1b[2J\x1b]0;pwned\x07\rOVERWRITTEN\0".into(),
                ))
            }
            "panic" => panic!("evil plugin panics on purpose"),
            "stack" => {
                let mut sink = [0u64; 64];
                Ok(vec![scorer::metric(
                    t,
                    "value",
                    recurse(0, &mut sink) as f64,
                )])
            }
            "echo_metrics" => {
                let sum: f64 = t
                    .metrics
                    .iter()
                    .filter(|(n, _)| n == "judge_score")
                    .map(|(_, v)| v)
                    .sum();
                Ok(vec![scorer::metric(t, "value", sum)])
            }
            "nan" => Ok(vec![scorer::metric(t, "value", f64::NAN)]),
            "flood" => Ok((0..100_000)
                .map(|_| scorer::metric(t, "value", 1.0))
                .collect()),
            "unknown_metric" => Ok(vec![scorer::metric(t, "undeclared", 1.0)]),
            "chatty" => {
                for i in 0..100_000 {
                    eprintln!("chatty line {i}");
                }
                Ok(vec![scorer::metric(t, "value", 1.0)])
            }
            _ => Ok(vec![scorer::metric(t, "value", 1.0)]),
        }
    }
}

vauban_plugin_sdk::scorer::export_scorer!(Evil);
