//! The docs show files as they are: a fenced block whose first line names
//! a file of the repository (`# examples/…/Cargo.toml`, `// src/…`) holds
//! that file's text exactly, so a reader who copies it gets what the test
//! suite builds and runs.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (doc, line, named file, block text) for every block naming a file.
fn blocks_naming_files(doc: &Path) -> Vec<(usize, String, String)> {
    let text = std::fs::read_to_string(doc).unwrap();
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if !line.starts_with("```") || line.len() == 3 {
            continue;
        }
        let Some((_, first)) = lines.next() else {
            break;
        };
        let named = first
            .strip_prefix("# ")
            .or_else(|| first.strip_prefix("// "))
            .filter(|p| !p.contains(' ') && root().join(p).is_file());
        let mut body = String::new();
        for (_, l) in lines.by_ref() {
            if l == "```" {
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        if let Some(p) = named {
            out.push((i + 1, p.to_owned(), body));
        }
    }
    out
}

#[test]
fn blocks_that_name_a_file_are_that_file() {
    let mut checked = 0;
    let docs = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .chain([root().join("README.md")])
        .filter(|p| p.extension().is_some_and(|e| e == "md"));
    for doc in docs {
        for (line, file, body) in blocks_naming_files(&doc) {
            let want = std::fs::read_to_string(root().join(&file)).unwrap();
            assert!(
                body == want,
                "{}:{line}: the block naming {file} differs from the file; paste the file's text",
                doc.display()
            );
            checked += 1;
        }
    }
    // The plugin guide's scorer: its Cargo.toml (with serde, which
    // `config::parse` needs) and its lib.rs.
    assert!(checked >= 2, "{checked} blocks checked");
}
