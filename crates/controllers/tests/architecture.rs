//! docs/architecture.md names the file and function of each behaviour, crash point and cache
//! (`path.rs::function`, under crates/controllers/src). Each must exist, so that the map stays
//! one hop from the code as the code moves.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

#[test]
fn every_function_the_architecture_names_exists() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(crate_dir.join("../../docs/architecture.md")).unwrap();
    let mut named = 0;
    let mut missing = Vec::new();
    for token in doc.split('`').skip(1).step_by(2) {
        let Some((file, function)) = token.split_once(".rs::") else {
            continue;
        };
        named += 1;
        let path = crate_dir.join("src").join(format!("{file}.rs"));
        let found = std::fs::read_to_string(&path).is_ok_and(|source| {
            source.lines().any(|line| {
                let line = line.trim_start();
                ["fn ", "async fn "].iter().any(|prefix| {
                    line.split_once(prefix).is_some_and(|(before, after)| {
                        (before.is_empty() || before.ends_with(' '))
                            && after.starts_with(function)
                            && after[function.len()..].starts_with(['(', '<'])
                    })
                }) || line.starts_with(&format!("pub struct {function}"))
            })
        });
        if !found {
            missing.push(format!("{file}.rs::{function}"));
        }
    }
    assert!(
        named >= 30,
        "only {named} functions named: was the table's format changed?"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md names functions that do not exist: {missing:?}"
    );
}
