//! Exercises the `tensors` import on each trace's raw logits and first raw
//! activation, so the host test can compare with values it computes itself.

use vauban_plugin_sdk::scorer::{
    self, ArtifactKind, Guest, Metric, PluginError, Polarity, ScorerInfo, TraceView, open,
};

struct Probe;

fn err(e: String) -> PluginError {
    PluginError::Failed(e)
}

impl Guest for Probe {
    fn describe() -> ScorerInfo {
        let m = |n: &str| scorer::spec(n, "value", Polarity::Neutral, "test", "probe");
        ScorerInfo {
            plugin: vauban_plugin_sdk::plugin_info!("Reads host-owned tensors"),
            needs: vec![ArtifactKind::Logits, ArtifactKind::Activation],
            metrics: vec![
                m("lse_last"),
                m("top1_index_last"),
                m("top1_value_last"),
                m("act_sum_last"),
                m("act_first_value"),
                m("chunked_equals_whole"),
                m("refusals"),
            ],
        }
    }

    fn configure(_: String) -> Result<(), PluginError> {
        Ok(())
    }

    fn score(traces: Vec<TraceView>) -> Result<Vec<Metric>, PluginError> {
        let mut out = Vec::new();
        for t in &traces {
            let logits = t
                .tensors
                .iter()
                .find(|i| i.kind == ArtifactKind::Logits && i.raw)
                .ok_or_else(|| PluginError::Unsupported(format!("{}: no raw logits", t.id)))?;
            let h = open(&t.id, &logits.id).map_err(err)?;
            let last = h.rows() - 1;
            let lse = h.logsumexp().map_err(err)?;
            out.push(scorer::metric(t, "lse_last", f64::from(lse[last as usize])));
            let top = h.top_k(last, 1).map_err(err)?;
            out.push(scorer::metric(t, "top1_index_last", f64::from(top[0].0)));
            out.push(scorer::metric(t, "top1_value_last", f64::from(top[0].1)));

            let act = t
                .tensors
                .iter()
                .find(|i| i.kind == ArtifactKind::Activation && i.raw)
                .ok_or_else(|| PluginError::Unsupported(format!("{}: no raw activation", t.id)))?;
            let a = open(&t.id, &act.id).map_err(err)?;
            let ones = vec![1.0f32; a.width() as usize];
            let sums = a.project(&ones).map_err(err)?;
            out.push(scorer::metric(
                t,
                "act_sum_last",
                f64::from(*sums.last().unwrap()),
            ));
            let first = a.read_rows(0, 1).map_err(err)?;
            out.push(scorer::metric(t, "act_first_value", f64::from(first[0])));
            // Reading row by row gives the same values as one read.
            let whole = a.read_rows(0, a.rows()).map_err(err)?;
            let chunked: Vec<f32> = (0..a.rows())
                .flat_map(|r| a.read_rows(r, 1).unwrap())
                .collect();
            out.push(scorer::metric(
                t,
                "chunked_equals_whole",
                f64::from(u8::from(whole == chunked)),
            ));

            // Every way to ask for what is not there is refused, not a trap.
            let mut refusals = 0u8;
            refusals += u8::from(open("not-in-batch", &logits.id).is_err());
            refusals += u8::from(open(&t.id, "no-such-artifact").is_err());
            refusals += u8::from(a.read_rows(a.rows(), 1).is_err());
            refusals += u8::from(a.project(&[1.0]).is_err());
            refusals += u8::from(h.top_k(h.rows(), 1).is_err());
            refusals += u8::from(h.read_rows(0, u64::MAX).is_err());
            out.push(scorer::metric(t, "refusals", f64::from(refusals)));
        }
        Ok(out)
    }
}

vauban_plugin_sdk::scorer::export_scorer!(Probe);
