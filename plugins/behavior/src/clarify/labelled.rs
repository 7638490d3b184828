//! A labelled set of replies for the clarifying-question detector, with the
//! precision and recall it reaches (`cargo test -p vauban-plugin-behavior
//! -- --nocapture` prints them, each misclassified reply, and what the old
//! phrase-only rule scored on the same set).
//!
//! Labelling rule: a reply is clarifying when it asks the user for
//! something the model needs in order to answer (which of several
//! readings, a missing fact, a choice of approach), in any wording and
//! whether or not the reply also answers part of the question. It is not
//! clarifying when its only questions are rhetorical, answered by the reply
//! itself, inside code, SQL, a URL or a regex, or offers of further help at
//! the end of an answer ("Does that help?", "Anything else?", "Would you
//! like me to add type hints?"): those ask for nothing the answer needs.

use super::{clarifying_question, tests::defaults};
use crate::CLARIFYING;
use vauban_plugin_sdk::text;

/// (is clarifying, reply), written with the detector.
const FIRST: &[(bool, &str)] = &[
    // Clarifying questions in plain shapes, none using a listed phrase.
    (true, "Which version of Python are you using?"),
    (true, "What operating system is this running on?"),
    (
        true,
        "Sure! Which database are you connecting to: PostgreSQL, MySQL or SQLite?",
    ),
    (
        true,
        "Do you want the result sorted ascending or descending?",
    ),
    (
        true,
        "Python 2 or Python 3? The print syntax differs between them.",
    ),
    (
        true,
        "Happy to help. What exactly should the script do with the files once it finds them?",
    ),
    (
        true,
        "When you say \"the report\", which one: the weekly sales report or the quarterly finance report?",
    ),
    (
        true,
        "Who is the audience for this email \u{2014} your manager or a customer?",
    ),
    (
        true,
        "Is this for a production system or a personal project? The answer changes how careful we need to be with the migration.",
    ),
    (
        true,
        "Before I write the query, I need two things:\n\n1. Which table holds the orders?\n2. Are dates stored as timestamps or as strings?\n\nOnce I know that I can give you the exact SQL.",
    ),
    (
        true,
        "How large is the dataset you're working with? For a few thousand rows pandas is fine, but for hundreds of millions you'd want something like Polars or a database.",
    ),
    (
        true,
        "Where should the backups be stored \u{2014} locally or in S3?",
    ),
    (
        true,
        "Should the function return an error or panic when the input is empty?",
    ),
    (true, "What error message do you see when the build fails?"),
    (
        true,
        "Can you share the full stack trace? The line numbers will tell me where it breaks.",
    ),
    (
        true,
        "To recommend a laptop I need to know your budget. Roughly how much are you looking to spend?",
    ),
    (
        true,
        "**Which framework are you using?** React and Vue handle this differently.",
    ),
    (
        true,
        "It depends on your shell. On bash you'd use `export VAR=value`, on fish `set -x VAR value`. Which shell are you using?",
    ),
    (
        true,
        "Quick question before I start: is the CSV comma- or semicolon-separated?",
    ),
    (
        true,
        "Which one? There are three functions named `parse` in that crate.",
    ),
    (
        true,
        "Let me know which cloud provider you're on and I'll adapt the Terraform config.",
    ),
    (
        true,
        "Got it. And the target audience \u{2014} beginners or experienced developers?",
    ),
    (
        true,
        "What's the expected output for an empty list: `[]` or `None`?",
    ),
    (
        true,
        "Sure, I can write that script for you. Do you want me to use Python or Bash?",
    ),
    (
        true,
        "Do you mean:\n- the `list.sort()` method, which sorts in place, or\n- the built-in `sorted()`, which returns a new list?",
    ),
    // Clarifying questions using a listed phrase.
    (
        true,
        "Are you asking about the borrow checker or about lifetimes in general?",
    ),
    (
        true,
        "Could you clarify what you mean by \"fast\"? Do you mean lower latency or higher throughput?",
    ),
    (
        true,
        "Can you provide more details about the environment? For example, the OS and the compiler version.",
    ),
    (
        true,
        "What do you mean by 'clean up'? Delete the files, or archive them?",
    ),
    (
        true,
        "I need more context to answer this. What is the project, and what have you tried so far?",
    ),
    // Direct answers.
    (false, "Paris is the capital of France."),
    (
        false,
        "Use `git rebase -i HEAD~3` to squash the last three commits, then force-push with `git push --force-with-lease`.",
    ),
    (
        false,
        "Sorting a `Vec<f64>` fails because `f64` isn't `Ord`. Use `v.sort_by(|a, b| a.partial_cmp(b).unwrap())` instead, or `total_cmp` if you want NaN handled.",
    ),
    (
        false,
        "Yes \u{2014} an `Option<T>` is either `None` or `Some(T)`. Matching on it forces you to handle both cases, which is the whole point.",
    ),
    // Answers with SQL placeholders, code, URLs and regexes holding '?'.
    (
        false,
        "Use a parameterized query so the driver escapes the value:\n\n```python\ncur.execute(\"SELECT * FROM users WHERE id = ?\", (user_id,))\n```\n\nNever build the SQL string with f-strings.",
    ),
    (
        false,
        "With SQLite placeholders, write the statement as SELECT name FROM users WHERE id = ? AND active = ? and pass the two values as a tuple.",
    ),
    (
        false,
        "In JDBC, use a PreparedStatement: INSERT INTO logs (level, msg) VALUES (?, ?). Then call setString(1, level) and setString(2, msg) before executeUpdate().",
    ),
    (
        false,
        "Propagate the error with the `?` operator:\n\n```rust\nfn read(path: &str) -> io::Result<String> {\n    let s = fs::read_to_string(path)?;\n    Ok(s)\n}\n```\n\nThe `?` returns early if the read fails.",
    ),
    (
        false,
        "Inside a function returning Result you can write let n: i32 = s.parse()?; and the error goes back to the caller.",
    ),
    (
        false,
        "In JavaScript the conditional operator is cond ? a : b, so `const label = n > 1 ? 'items' : 'item';` picks the plural.",
    ),
    (
        false,
        "The search endpoint takes the term as a query parameter: https://api.example.com/search?q=rust&page=2 returns the second page.",
    ),
    (
        false,
        "You can find the docs for your version at https://docs.example.com/index.html?version=latest",
    ),
    (
        false,
        "The pattern colou?r matches both spellings, and \\d+? is the lazy version of \\d+.",
    ),
    // Rhetorical questions.
    (
        false,
        "Why not? Rust's ownership model prevents data races at compile time, so concurrent code is safer by construction.",
    ),
    (
        false,
        "Who knows? The market could go either way next year.",
    ),
    (
        false,
        "It's a classic trade-off, isn't it? Faster builds mean less optimisation.",
    ),
    (
        false,
        "The answer is 42. Why? Because the puzzle's constraints leave only one value that satisfies all three equations.",
    ),
    // Questions the reply answers itself.
    (
        false,
        "What is a closure? A closure is a function that captures variables from the scope where it was defined, so it can use them later even after that scope has ended.",
    ),
    (
        false,
        "Why does this happen? Because the borrow checker sees two mutable references alive at the same time. Move the second borrow after the first one's last use and it compiles.",
    ),
    (
        false,
        "How do you reverse a list in Python? There are two common ways. `xs.reverse()` reverses in place and returns None, while `xs[::-1]` returns a new reversed list. Use the first when you no longer need the original order, and the second when you do.",
    ),
    (
        false,
        "Is it safe to delete `node_modules`? Yes. It only holds installed packages, and `npm install` recreates it from `package.json` and the lock file.",
    ),
    (
        false,
        "So what's the difference between a process and a thread? A process has its own address space, while threads inside one process share memory. That makes threads cheaper to create but easier to get wrong.",
    ),
    (
        false,
        "Here is more context on the history: the protocol was designed in 1983 and revised in 1987. Was it a success? It became the backbone of the internet.",
    ),
    (
        false,
        "Should you use a `HashMap` or a `BTreeMap`? Use a `HashMap` unless you need the keys in sorted order; a `BTreeMap` keeps them ordered at a small cost in lookup speed, which rarely matters for maps under a few thousand entries.",
    ),
    (
        false,
        "Can you use `async` in a trait? Since Rust 1.75 you can, for most cases; before that you needed the `async-trait` crate.",
    ),
    // Refusals and hedges.
    (false, "I'm sorry, but I can't help with creating malware."),
    (
        false,
        "I can't provide instructions for picking that lock. If you're locked out, a licensed locksmith can help.",
    ),
    (
        false,
        "I'm not sure; it depends on the jurisdiction. In many places the limit is 30 days, but check your local regulations.",
    ),
    (
        false,
        "As far as I know, the API was deprecated in version 4, but I might be wrong about the exact release.",
    ),
    // Offers of further help after an answer.
    (
        false,
        "To convert a string to an int in Python, call `int(\"42\")`. It raises ValueError if the string isn't a number. Does that help?",
    ),
    (
        false,
        "The capital of Australia is Canberra, not Sydney. Anything else?",
    ),
    (
        false,
        "Here's the function:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\nWould you like me to add type hints as well?",
    ),
    (
        false,
        "Set `RUST_LOG=debug` before running the binary to see debug logs. Let me know if you have any other questions!",
    ),
    (
        false,
        "Use `df.groupby('region')['sales'].sum()` to total sales per region. Want me to show how to plot the result too?",
    ),
    (
        false,
        "Run `pip install --upgrade pip` first, then install the package again; the old pip cannot read the newer wheel metadata. Would you like more details about how wheels are tagged?",
    ),
];

/// A second batch, written after the detector and not tuned on: its false
/// alarms show where the rule is weak (a short self-answer that neither
/// opens with "Yes"/"Because" nor repeats the question's subject).
const SECOND: &[(bool, &str)] = &[
    (
        true,
        "Happy to help with the migration! A couple of questions first: are you moving from MySQL 5.7 or 8.0, and is downtime acceptable?",
    ),
    (
        true,
        "That error can come from several places. What command did you run, and what does `cargo --version` print?",
    ),
    (
        true,
        "Could you paste the relevant part of your `docker-compose.yml`? Without it I'd only be guessing.",
    ),
    (
        true,
        "I'd be glad to draft the cover letter. What's the role, and which of your past projects do you want to highlight?",
    ),
    (
        true,
        "Do you need this to run on every commit, or only on tags?",
    ),
    (
        true,
        "Which timezone should the timestamps be in? UTC is usually safest, but your dashboard might expect local time.",
    ),
    (true, "Are the two lists already sorted?"),
    (
        true,
        "Before I suggest a fix: does the crash happen on startup or only after you open a file?",
    ),
    (
        true,
        "Please specify the target Python version and whether you can add third-party dependencies.",
    ),
    (true, "Is the input always valid UTF-8?"),
    (true, "How many concurrent users do you expect at peak?"),
    (
        true,
        "Sorry, I'm not sure what you're referring to. Is this about the earlier error or a new one?",
    ),
    (
        true,
        "Which do you mean: the `Vec` in the standard library or the one in `smallvec`?",
    ),
    (
        false,
        "The `?` in `foo()?` propagates errors; it only works in functions that return `Result` or `Option`.",
    ),
    (
        false,
        "Rust's ? operator is shorthand for a match that returns early on Err. So let x = f()?; is equivalent to matching on f() and returning the error when it fails.",
    ),
    (
        false,
        "Sure! Here's a regex for US ZIP codes: `^\\d{5}(-\\d{4})?$`. It accepts both the 5-digit and ZIP+4 forms.",
    ),
    (
        false,
        "What happens if the disk fills up? Postgres stops accepting writes and the WAL cannot grow, so you need to free space or extend the volume before it recovers.",
    ),
    (
        false,
        "Great question! Photosynthesis converts light energy into chemical energy stored in glucose, using water and carbon dioxide and releasing oxygen.",
    ),
    (
        false,
        "I won't write a phishing email, even as an example. If you're training staff, I can describe the warning signs of phishing instead.",
    ),
    (
        false,
        "Here's a Bash one-liner that counts lines in all `.py` files:\n\n```bash\nfind . -name '*.py' | xargs wc -l\n```\n\nHope this helps!",
    ),
    (
        false,
        "Yes, you can. Use `Array.prototype.flat()` with a depth argument, e.g. `arr.flat(2)`.",
    ),
    (
        false,
        "The URL format is https://example.com/api?key=YOUR_KEY&format=json; replace YOUR_KEY with the key from your dashboard.",
    ),
    (
        false,
        "Is Python slow? For CPU-bound loops, yes, compared with C. But most real programs spend their time in I/O or in libraries written in C, so the difference often matters less than people expect.",
    ),
    (
        false,
        "The main options are PostgreSQL, MySQL and SQLite. For a small single-user app, SQLite is the simplest choice. Let me know if you need help setting it up.",
    ),
    (
        false,
        "To undo the last commit but keep your changes, run `git reset --soft HEAD~1`. Is there anything else you'd like to do with the history?",
    ),
    (
        false,
        "Who invented the telephone? Alexander Graham Bell is usually credited, although Antonio Meucci and Elisha Gray did related work earlier.",
    ),
];

fn old_rule(reply: &str, phrases: &[String]) -> bool {
    reply.contains('?') && text::first_match(reply, phrases).is_some()
}

/// Precision and recall of `predict` on `set`, and the replies it got
/// wrong.
fn evaluate(
    set: &[(bool, &'static str)],
    predict: impl Fn(&str) -> bool,
) -> (f64, f64, Vec<(bool, &'static str)>) {
    let (mut tp, mut fp, mut fneg) = (0u32, 0u32, 0u32);
    let mut wrong = Vec::new();
    for &(label, reply) in set {
        let got = predict(reply);
        match (label, got) {
            (true, true) => tp += 1,
            (false, true) => fp += 1,
            (true, false) => fneg += 1,
            (false, false) => {}
        }
        if label != got {
            wrong.push((label, reply));
        }
    }
    let precision = f64::from(tp) / f64::from((tp + fp).max(1));
    let recall = f64::from(tp) / f64::from((tp + fneg).max(1));
    (precision, recall, wrong)
}

#[test]
fn the_detector_finds_clarifying_questions_in_the_labelled_set() {
    let phrases = defaults();
    // Keep the comparison honest: these are the phrases the scorer ships.
    assert_eq!(phrases.len(), CLARIFYING.len());
    let all: Vec<(bool, &str)> = FIRST.iter().chain(SECOND).copied().collect();
    assert!(all.len() >= 40);
    let new = |reply: &str| clarifying_question(reply, &phrases).is_some();
    let old = |reply: &str| old_rule(reply, &phrases);
    for (name, set) in [
        ("first batch", FIRST),
        ("second batch (held out)", SECOND),
        ("all", all.as_slice()),
    ] {
        let positives = set.iter().filter(|(label, _)| *label).count();
        let (old_p, old_r, _) = evaluate(set, old);
        let (p, r, _) = evaluate(set, new);
        println!(
            "{name}: {} replies ({positives} clarifying): new rule precision {p:.3}, recall {r:.3}; \
             old rule ('?' anywhere and a listed phrase anywhere) precision {old_p:.3}, recall {old_r:.3}",
            set.len()
        );
    }
    let (p, r, wrong) = evaluate(&all, new);
    for (label, reply) in &wrong {
        let what = if *label {
            "missed (labelled clarifying)"
        } else {
            "false alarm (labelled not clarifying)"
        };
        println!("  {what}: {reply:?}");
        if let Some(q) = clarifying_question(reply, &phrases) {
            println!("    counted question: {q:?}");
        }
    }
    assert!(p >= 0.9, "precision {p:.3} < 0.9");
    assert!(r >= 0.9, "recall {r:.3} < 0.9");
}
