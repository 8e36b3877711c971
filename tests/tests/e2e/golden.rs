//! The golden corpus of the faces' translations: every request shape of
//! `tests/fixtures/faces/` (real clients' requests), of
//! `tests/fixtures/golden/cases/` (shapes written to pin one behaviour)
//! and of `tests/fixtures/golden/sdk-shapes.json` (generated from the
//! official SDKs' types by `tests/python/sdk_shapes.py`), sent through its
//! face whole and streamed, in front of a deterministic fake model of each
//! protocol (`toolgate_tests::fakes`). One snapshot per case holds what
//! the gateway sent the model and what it answered the client, ids and
//! times normalized, so a change of translation shows as a changed
//! snapshot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{Value, json};
use toolgate_tests::fakes::anthropic::FakeAnthropic;
use toolgate_tests::fakes::gemini::FakeGemini;
use toolgate_tests::fakes::openai_chat::FakeChat;
use toolgate_tests::fakes::openai_responses::FakeResponses;
use toolgate_tests::fakes::{Brain, Log};
use toolgate_tests::{ConfigDir, Gateway, load_catalog, repo_root};

const CONFIG: &str = r#"
--- toolgate.yaml
defaults:
  tool_set: default
  max_tool_iterations: 4
builtins:
  enabled: [calculator]
upstreams:
  - name: fake
    protocol: ${PROTOCOL}
    base_url: ${MODEL}
models:
  - model: "*"
    upstream: fake
    price: { input: 3, output: 15, cached_input: 0.3, reasoning: 20 }
--- tool-sets/default.yaml
name: default
tools: [calculator]
"#;

/// One request of the corpus.
struct Case {
    name: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: Value,
}

/// A Gemini case's path (streamed: `:streamGenerateContent?alt=sse`).
const GEMINI_PATH: &str = "/v1beta/models/gemini-2.5-flash:generateContent";

/// The face a case's name starts with (after `sdk-`), and its path.
fn face_path(name: &str) -> &'static str {
    let name = name.strip_prefix("sdk-").unwrap_or(name);
    if name.starts_with("messages") {
        "/v1/messages"
    } else if name.starts_with("responses") {
        "/v1/responses"
    } else if name.starts_with("gemini") {
        GEMINI_PATH
    } else {
        "/v1/chat/completions"
    }
}

/// A case file: a request body, or `{path, headers, body}`.
fn case_of(name: String, v: Value) -> Case {
    if let Some(body) = v.get("body").filter(|_| v.get("path").is_some()) {
        return Case {
            path: v["path"].as_str().unwrap().to_owned(),
            headers: v["headers"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect(),
            body: body.clone(),
            name,
        };
    }
    Case {
        path: face_path(&name).to_owned(),
        headers: BTreeMap::new(),
        body: v,
        name,
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn corpus() -> Vec<Case> {
    let root = repo_root().join("tests/fixtures");
    let mut cases = Vec::new();
    for dir in ["faces", "golden/cases"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for f in files {
            let name = f.file_stem().unwrap().to_string_lossy().into_owned();
            cases.push(case_of(name, read_json(&f)));
        }
    }
    let sdk = read_json(&root.join("golden/sdk-shapes.json"));
    for (name, v) in sdk.as_object().unwrap() {
        cases.push(case_of(format!("sdk-{name}"), v.clone()));
    }
    cases
}

/// Ids the gateway or a fake makes up, and times: replaced by stable
/// placeholders (each distinct id by the same one everywhere).
struct Normalizer {
    ids: HashMap<String, String>,
}

/// Prefixes of made-up ids followed by at least this many id characters.
const ID_PREFIXES: [&str; 13] = [
    "chatcmpl-",
    "msg_",
    "call_",
    "resp_",
    "fc_",
    "rs_",
    "mcp_",
    "toolu_",
    "item_",
    "msg-",
    "ctc_",
    "tsc_",
    "gemini_call_",
];

impl Normalizer {
    fn is_made_up(s: &str) -> bool {
        let uuid = s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4;
        uuid || ID_PREFIXES.iter().any(|p| {
            s.strip_prefix(p).is_some_and(|rest| {
                rest.len() >= 16 && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        })
    }

    fn id(&mut self, s: &str) -> String {
        let n = self.ids.len();
        self.ids
            .entry(s.to_owned())
            .or_insert_with(|| format!("<id{n}>"))
            .clone()
    }

    fn value(&mut self, v: &mut Value) {
        match v {
            Value::String(s) if Self::is_made_up(s) => *s = self.id(s),
            Value::String(s) => {
                // Ids inside a text (an answer quoting a call's id).
                let words: Vec<String> = s
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                    .filter(|w| Self::is_made_up(w))
                    .map(str::to_owned)
                    .collect();
                for w in words {
                    let id = self.id(&w);
                    *s = s.replace(&w, &id);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| self.value(v)),
            Value::Object(o) => {
                for (k, v) in o.iter_mut() {
                    match k.as_str() {
                        "created" | "created_at" | "completed_at" if v.is_number() => {
                            *v = json!(0);
                        }
                        "execution_time" | "duration_ms" if v.is_number() => *v = json!(0),
                        "responseId" if v.is_string() => *v = json!("<responseId>"),
                        _ => self.value(v),
                    }
                }
            }
            _ => {}
        }
    }
}

/// A response's server-sent events: `{event, data}` each (comments, such
/// as keep-alives, left out).
fn sse_events(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    // Google's events end with `\r\n\r\n`.
    let text = text.replace("\r\n", "\n");
    for block in text.split("\n\n") {
        let mut event = None;
        let mut data = Vec::new();
        for line in block.lines() {
            if let Some(e) = line.strip_prefix("event:") {
                event = Some(e.trim().to_owned());
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
            }
        }
        if data.is_empty() {
            continue;
        }
        let data = data.join("\n");
        let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
        out.push(match event {
            Some(e) => json!({"event": e, "data": data}),
            None => json!({"data": data}),
        });
    }
    out
}

/// A fake model of one protocol.
enum Fake {
    Chat(FakeChat),
    Anthropic(FakeAnthropic),
    Responses(FakeResponses),
    Gemini(FakeGemini),
}

impl Fake {
    async fn start(protocol: &str) -> Fake {
        match protocol {
            "anthropic" => Fake::Anthropic(FakeAnthropic::start(Brain::Shape).await),
            "openai_responses" => Fake::Responses(FakeResponses::start(Brain::Shape).await),
            "gemini" => Fake::Gemini(FakeGemini::start(Brain::Shape).await),
            _ => Fake::Chat(FakeChat::start().await),
        }
    }

    fn log(&self) -> &Log {
        match self {
            Fake::Chat(f) => &f.log,
            Fake::Anthropic(f) => &f.log,
            Fake::Responses(f) => &f.log,
            Fake::Gemini(f) => &f.log,
        }
    }

    fn base_url(&self) -> String {
        match self {
            Fake::Chat(f) => f.base_url(),
            Fake::Anthropic(f) => f.base_url(),
            Fake::Responses(f) => f.base_url(),
            Fake::Gemini(f) => f.base_url(),
        }
    }
}

/// The model protocols the corpus runs against, each with its fake.
const PROTOCOLS: [&str; 4] = ["openai_chat", "anthropic", "openai_responses", "gemini"];

/// One exchange of a case: the model requests it made and the answer.
async fn exchange(gateway: &Gateway, fake: &Fake, case: &Case, stream: bool) -> Value {
    let mut body = case.body.clone();
    // Gemini streams by its method, every other face by a field.
    let path = match case.path.strip_suffix(":generateContent") {
        Some(model) if stream => format!("{model}:streamGenerateContent?alt=sse"),
        Some(_) => case.path.clone(),
        None => {
            body["stream"] = json!(stream);
            case.path.clone()
        }
    };
    let before = fake.log().len();
    let mut req = reqwest::Client::new().post(gateway.url(&path)).json(&body);
    for (k, v) in &case.headers {
        req = req.header(k, v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let notices = resp
        .headers()
        .get("x-toolgate-notice")
        .map(|v| json!(v.to_str().unwrap()));
    let is_sse = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
    let text = resp.text().await.unwrap();
    let answer = if is_sse {
        Value::Array(sse_events(&text))
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    let upstream: Vec<Value> = fake
        .log()
        .since(before)
        .into_iter()
        .map(|r| json!({"path": r.path, "body": r.body}))
        .collect();
    let mut out = json!({"upstream": upstream, "status": status, "answer": answer});
    if let Some(n) = notices {
        out["notices"] = n;
    }
    out
}

/// What one call of a fake costs at the golden route's price (dollars per
/// million tokens: input 3, cached input 0.3, output 15, reasoning 20):
/// each fake answers with `USAGE` (Anthropic's tells no reasoning).
fn call_cost(protocol: &str) -> f64 {
    let (input, output, cached, reasoning) = toolgate_tests::fakes::USAGE;
    let reasoning = if protocol == "anthropic" {
        0
    } else {
        reasoning
    };
    ((input - cached) as f64 * 3.0
        + cached as f64 * 0.3
        + (output - reasoning) as f64 * 15.0
        + reasoning as f64 * 20.0)
        / 1e6
}

/// The `toolgate` report of an exchange's answer (a stream's last).
fn report_of(answer: &Value) -> Option<&Value> {
    match answer {
        Value::Array(events) => events.iter().rev().find_map(report_of),
        Value::Object(o) => o.get("toolgate").or_else(|| {
            // Responses' events carry the response, Gemini's its chunk.
            o.values().find_map(|v| v.as_object()?.get("toolgate"))
        }),
        _ => None,
    }
}

/// Where the answer reports its cost, it is what the fake's answered
/// calls cost (one per iteration; a request the fake refused, which the
/// loop sent again another way, told no usage).
fn cost_differs(protocol: &str, exchange: &Value) -> Option<String> {
    let report = report_of(&exchange["answer"])?;
    let sent = exchange["upstream"].as_array().map_or(0, Vec::len);
    let calls = report["iterations"].as_u64().unwrap_or(0) as usize;
    if calls == 0 || calls > sent {
        return Some(format!("{calls} iterations, {sent} model requests"));
    }
    let expected = calls as f64 * call_cost(protocol);
    let got = report["cost"]["usd"].as_f64();
    match got {
        Some(usd) if (usd - expected).abs() < 1e-9 => None,
        _ => Some(format!(
            "{calls} calls should cost {expected}, the report says {}",
            report["cost"]
        )),
    }
}

/// Every case of the corpus, whole and streamed, against the fake of each
/// model protocol: one snapshot per case and protocol; and where a loop
/// reports its cost, it is what its model calls cost.
#[tokio::test]
async fn every_face_request_translates_as_its_snapshot_says() {
    let cases = corpus();
    assert!(cases.len() >= 100, "the corpus has {} cases", cases.len());
    let mut failures = Vec::new();
    let (mut costs, mut costed) = (Vec::new(), 0);
    for protocol in PROTOCOLS {
        for case in &cases {
            // A fresh model and gateway per case: no cached result, no
            // count of an earlier case shows in another.
            let fake = Fake::start(protocol).await;
            let dir = ConfigDir::fixture(
                CONFIG,
                &[("MODEL", &fake.base_url()), ("PROTOCOL", protocol)],
            );
            let gateway = Gateway::start(load_catalog(dir.path(), &[])).await;
            let mut normalizer = Normalizer {
                ids: HashMap::new(),
            };
            let mut shown = json!({
                "request": {"path": case.path, "headers": case.headers},
                "whole": exchange(&gateway, &fake, case, false).await,
                "stream": exchange(&gateway, &fake, case, true).await,
            });
            for side in ["whole", "stream"] {
                if let Some(why) = cost_differs(protocol, &shown[side]) {
                    costs.push(format!("{protocol}: {} ({side}): {why}", case.name));
                } else if report_of(&shown[side]["answer"]).is_some() {
                    costed += 1;
                }
            }
            normalizer.value(&mut shown);
            let text = serde_json::to_string_pretty(&shown).unwrap();
            let name = format!("{protocol}__{}", case.name);
            let result = std::panic::catch_unwind(|| {
                insta::with_settings!({
                    snapshot_path => "snapshots/golden",
                    prepend_module_to_snapshot => false,
                    omit_expression => true,
                }, {
                    insta::assert_snapshot!(name, text);
                });
            });
            if result.is_err() {
                failures.push(format!("{protocol}: {}", case.name));
            }
        }
    }
    assert!(costs.is_empty(), "costs differ: {costs:#?}");
    assert!(costed > 1000, "only {costed} answers reported a cost");
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from their snapshots: {failures:?}",
        failures.len(),
        cases.len() * PROTOCOLS.len()
    );
}
