//! The data-flow rule of docs/ARCHITECTURE.md, checked on the source: each stage imports only what it consumes
//! (record: perf_data; symbolize: perf_data; report: symbolize, perf_data; archive and perf_data: no stage), so a
//! change that makes data flow backwards fails here instead of in review.

use std::path::{Path, PathBuf};

const STAGES: [&str; 7] = ["cli", "commands", "record", "perf_data", "symbolize", "report", "archive"];

/// The stages a stage may import (`None`: any, for the wiring and the command line).
fn allowed(stage: &str) -> Option<&'static [&'static str]> {
    match stage {
        "perf_data" | "archive" => Some(&[]),
        "record" | "symbolize" => Some(&["perf_data"]),
        "report" => Some(&["symbolize", "perf_data"]),
        _ => None,
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn stages_import_only_what_they_consume() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let stage = first.trim_end_matches(".rs");
        let Some(allowed) = allowed(stage) else { continue };
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let used: String = code[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if used != stage && STAGES.contains(&used.as_str()) && !allowed.contains(&used.as_str()) {
                    wrong.push(format!("{}:{}: {stage} imports {used}", rel.display(), n + 1));
                }
            }
        }
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    assert!(wrong.is_empty(), "imports against the data flow:\n{}", wrong.join("\n"));
}
