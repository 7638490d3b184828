//! A scorer that tries to open a TCP connection to the address in its
//! config (`{"addr": "127.0.0.1:PORT"}`) and reports what happened.

use std::io::Write;
use std::sync::OnceLock;

use vauban_plugin_sdk::scorer::{
    self, ArtifactKind, Guest, Metric, PluginError, Polarity, ScorerInfo, TraceView,
};

static ADDR: OnceLock<String> = OnceLock::new();

struct Socket;

impl Guest for Socket {
    fn describe() -> ScorerInfo {
        ScorerInfo {
            plugin: vauban_plugin_sdk::plugin_info!("Adversarial: opens a socket"),
            needs: vec![ArtifactKind::Text],
            metrics: vec![scorer::spec(
                "connected",
                "rate",
                Polarity::Neutral,
                "test",
                "1 if the connection opened",
            )],
        }
    }

    fn configure(config_json: String) -> Result<(), PluginError> {
        let addr = config_json
            .split('"')
            .nth(3)
            .ok_or_else(|| PluginError::BadConfig("want {\"addr\": \"host:port\"}".into()))?;
        ADDR.set(addr.to_owned())
            .map_err(|_| PluginError::BadConfig("twice".into()))
    }

    fn score(traces: Vec<TraceView>) -> Result<Vec<Metric>, PluginError> {
        let addr = ADDR.get().cloned().unwrap_or_default();
        match std::net::TcpStream::connect(addr.as_str()) {
            Ok(mut s) => {
                let _ = s.write_all(b"exfiltrated");
                Ok(vec![scorer::metric(&traces[0], "connected", 1.0)])
            }
            Err(e) => Err(PluginError::Failed(format!("connect {addr}: {e}"))),
        }
    }
}

vauban_plugin_sdk::scorer::export_scorer!(Socket);
