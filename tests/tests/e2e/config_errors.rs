//! The corpus of broken configurations under `fixtures/broken/`: each folder
//! is a configuration, and its snapshot is exactly what `toolgate check`
//! reports (every error, with file:line:column and how to fix it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use toolgate_engine::catalog::Catalog;

fn report(dir: &Path) -> String {
    // A fixed environment: only PRESENT is set.
    let env = |name: &str| (name == "PRESENT").then(|| "1".to_owned());
    match Catalog::load_with_env(dir, &env) {
        Ok(catalog) => {
            let mut out: Vec<String> = catalog.warnings.iter().map(ToString::to_string).collect();
            out.push(format!("ok: {}", catalog.summary()));
            out.join("\n")
        }
        Err(errors) => errors
            .diagnostics
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[test]
fn every_broken_configuration_reports_its_errors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/broken");
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "the corpus is missing");
    for case in cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let out = report(&case);
        insta::assert_snapshot!(name, out);
    }
}

#[test]
fn the_shipped_configuration_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let catalog = Catalog::load_with_env(root, &|_| None).unwrap_or_else(|e| panic!("{e}"));
    assert!(catalog.tool("get_forecast").is_some());
    assert!(catalog.tool("geocode").is_some());
    assert!(
        catalog.unavailable_tool("web_search").is_some(),
        "web_search needs its key"
    );
    assert_eq!(catalog.default_set().unwrap().name, "default");
    // With the key, web search is enabled.
    let with_key =
        Catalog::load_with_env(root, &|k| (k == "BRAVE_API_KEY").then(|| "k".into())).unwrap();
    assert!(with_key.tool("web_search").is_some());
}
