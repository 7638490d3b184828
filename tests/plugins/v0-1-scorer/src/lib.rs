//! A scorer built against `vauban:plugin@0.1.0`, as a third party would have
//! built it before 0.2: the host must still run it, `tensors` import
//! included. Reports each trace's completion length in characters and, when
//! the trace holds raw logits, the number of rows the host's tensor has.

wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "scorer-plugin" });

use exports::vauban::plugin::scorer::{Guest, Metric, MetricSpec, ScorerInfo, TraceView};
use vauban::plugin::tensors::open;
use vauban::plugin::types::{ArtifactKind, PluginError, PluginInfo, Polarity};

struct Legacy;

fn spec(name: &str) -> MetricSpec {
    MetricSpec {
        name: name.into(),
        unit: "count".into(),
        polarity: Polarity::Neutral,
        family: "test".into(),
        description: "a 0.1 scorer's metric".into(),
    }
}

impl Guest for Legacy {
    fn describe() -> ScorerInfo {
        ScorerInfo {
            plugin: PluginInfo {
                name: "v0-1-scorer".into(),
                version: "0.1.0".into(),
                description: "built against vauban:plugin@0.1.0".into(),
            },
            needs: vec![ArtifactKind::Text],
            metrics: vec![spec("completion_chars"), spec("logit_rows")],
        }
    }

    fn configure(_: String) -> Result<(), PluginError> {
        Ok(())
    }

    fn score(traces: Vec<TraceView>) -> Result<Vec<Metric>, PluginError> {
        let mut out = Vec::new();
        for t in &traces {
            let chars = t.completion.as_deref().unwrap_or("").chars().count();
            out.push(Metric {
                trace_id: t.id.clone(),
                name: "completion_chars".into(),
                value: chars as f64,
            });
            if let Some(logits) = t
                .tensors
                .iter()
                .find(|i| i.kind == ArtifactKind::Logits && i.raw)
            {
                let h = open(&t.id, &logits.id).map_err(PluginError::Failed)?;
                out.push(Metric {
                    trace_id: t.id.clone(),
                    name: "logit_rows".into(),
                    value: h.rows() as f64,
                });
            }
        }
        Ok(out)
    }
}

export!(Legacy);
