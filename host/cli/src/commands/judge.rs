//! `vauban judge`: ask a model a judge's question, as a judged scorer's
//! requests will (a closed set of answers scored, or a short generation).

use std::io::Write;

use anyhow::bail;
use clap::Args;

use vauban::judge::{Ask, JudgeRequest, LocalJudge};

use super::model::ModelArgs;

/// Arguments of `vauban judge`.
#[derive(Debug, Args)]
pub struct JudgeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The question (the user's message, through the model's chat
    /// template unless --raw).
    #[arg(long)]
    pub prompt: String,
    /// A system message for the chat template.
    #[arg(long, conflicts_with = "raw")]
    pub system: Option<String>,
    /// Send the prompt as plain text, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// A closed set of answers to score (`Yes,No`): each one's
    /// log-probability as the reply's opening, and its probability within
    /// the set.
    #[arg(long, value_delimiter = ',', conflicts_with = "max_tokens")]
    pub choices: Vec<String>,
    /// Generate at most this many tokens instead (greedy).
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn ask(args: &JudgeArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let ask = match (args.choices.is_empty(), args.max_tokens) {
        (false, _) => Ask::Choices {
            options: args.choices.clone(),
        },
        (true, Some(max_tokens)) => Ask::Generate { max_tokens },
        (true, None) => bail!(
            "ask for --choices A,B (a closed set of answers) or --max-tokens N (a generation)"
        ),
    };
    let request = JudgeRequest {
        prompt: args.prompt.clone(),
        system: args.system.clone(),
        raw: args.raw,
        ask,
    };
    let judge = LocalJudge::new(args.model.load()?);
    let answer = judge.answer(&request)?;
    if args.json {
        let record = serde_json::json!({
            "judge": judge.identity(),
            "request": request,
            "answer": answer,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&record)?)?;
        return Ok(());
    }
    if let Some(text) = &answer.text {
        writeln!(out, "{text}")?;
    }
    if let Some(verdict) = answer.verdict() {
        writeln!(out, "verdict: {verdict}")?;
        for c in &answer.choices {
            writeln!(
                out,
                "  {:<16} p = {:.4}  (log-probability {:.4})",
                format!("{:?}", c.option),
                c.probability,
                c.logprob
            )?;
        }
    }
    writeln!(
        out,
        "({} prompt tokens, {} answer tokens)",
        answer.prompt_tokens, answer.answer_tokens
    )?;
    Ok(())
}
