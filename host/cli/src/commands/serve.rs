//! `vauban serve`: the model behind an OpenAI-compatible endpoint, with
//! interventions or a steering policy applied (the library's `serve`).

use std::io::Write;
use std::net::SocketAddr;

use vauban::executor::Executor;
use vauban::intervene::policy::StepPolicy;
use vauban::serve::{PolicySource, Served};

use super::model::{LoadedPolicy, ModelArgs, SteerArgs};

/// Arguments of `vauban serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub steer: SteerArgs,
    /// The address to listen on (port 0 picks a free port; the chosen
    /// address is printed). Loopback by default: the server has no
    /// authentication.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The model id clients name (default: the model file's stem).
    #[arg(long)]
    pub name: Option<String>,
}

impl PolicySource for LoadedPolicy {
    fn start(&self) -> anyhow::Result<Box<dyn StepPolicy + '_>> {
        Ok(Box::new(self.run()?))
    }
    fn describe(&self) -> String {
        let p = &self.policy.info().plugin;
        format!("{} {}", p.name, p.version)
    }
}

/// Loads the model and serves it until Ctrl-C.
pub fn run(args: &ServeArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let exec = args.model.load()?;
    let interventions = args.steer.interventions(&exec)?;
    let policy = args.steer.policy(&exec)?;
    let name = args.name.clone().unwrap_or_else(|| {
        args.model
            .model
            .as_ref()
            .and_then(|p| p.file_stem())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| exec.model_ref().name)
    });
    let served = Served {
        exec,
        interventions,
        policy: policy.map(|p| Box::new(p) as Box<dyn PolicySource>),
        name,
    };
    let fingerprint = served.fingerprint();
    let name = served.name.clone();
    let steering = match (served.interventions.len(), &served.policy) {
        (0, None) => "no intervention".to_owned(),
        (n, None) => format!("{n} intervention(s)"),
        (n, Some(p)) => format!("{n} intervention(s) and the policy {}", p.describe()),
    };
    vauban::serve::serve(served, args.listen, |addr| {
        // The one line a script waits for; the URL is what clients take.
        let _ = writeln!(
            out,
            "serving `{name}` ({steering}; fingerprint {fingerprint}) at http://{addr}/v1"
        );
        let _ = out.flush();
    })
}
