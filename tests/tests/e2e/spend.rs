//! Spend and budgets through `toolgate serve`: a budget shared by two
//! replicas through Redis and raced by 20 loops overspends by at most one
//! model call; a budget kept in the embedded store survives a restart and
//! refuses in each face's own shape; a loop that spends its budget stops
//! running tools and answers; the spend API sums by model, key and tool.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{ConfigDir, RedisServer, Server, fill, user};

const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-0123456789";

/// Two keys (`alice` an operator), the calculator, a route priced at a
/// dollar per thousand tokens, and `budgets` (YAML) with `extra`.
fn config(model: &MockLlm, budgets: &str, extra: &str) -> ConfigDir {
    let gateway = fill(
        r#"upstreams:
  - name: mock
    base_url: ${MODEL}
    retries: { max_attempts: 1 }
models:
  - model: "*"
    upstream: mock
    price: { input: 1000, output: 1000 }
builtins:
  enabled: [calculator]
auth:
  keys:
    - name: alice
      key_env: ALICE_KEY
      console: all
    - name: bob
      key_env: BOB_KEY
spend:
  budgets:
${BUDGETS}
${EXTRA}
"#,
        &[
            ("MODEL", &model.base_url()),
            ("BUDGETS", budgets),
            ("EXTRA", extra),
        ],
    );
    ConfigDir::new(&[
        ("toolgate.yaml", &gateway),
        (
            "tool-sets/default.yaml",
            "name: default\ntools: [calculator]\n",
        ),
    ])
}

const ENV: [(&str, &str); 2] = [("ALICE_KEY", ALICE), ("BOB_KEY", BOB)];

async fn post(
    s: &Server,
    path: &str,
    key: &str,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = reqwest::Client::new()
        .post(s.url(path))
        .header("x-api-key", key)
        .header("x-goog-api-key", key)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    let text = r.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(s: &Server, path: &str, key: &str) -> Value {
    let r = reqwest::Client::new()
        .get(s.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn chat(text: &str) -> Value {
    json!({"model": "mock-model", "messages": user(text)})
}

/// A request's cost as its report says.
fn cost(answer: &Value) -> f64 {
    answer["toolgate"]["cost"]["usd"].as_f64().unwrap()
}

#[tokio::test]
async fn twenty_loops_on_two_replicas_overspend_a_shared_budget_by_at_most_one_call() {
    let redis = RedisServer::start().await;
    let model = MockLlm::start().await;
    let dir = config(
        &model,
        "    - name: team\n      for: { keys: [alice, bob] }\n      limit: { usd: 0.5 }\n      period: day",
        "state:\n  redis:\n    url_env: REDIS_URL\n    prefix: \"spend-test:\"",
    );
    let url = redis.url();
    let env = [ENV[0], ENV[1], ("REDIS_URL", url.as_str())];
    let a = Server::start(dir.path(), &env).await;
    let b = Server::start(dir.path(), &env).await;
    // One call first: the count learns what a call costs.
    let (status, _, first) = post(&a, "/v1/chat/completions", ALICE, chat("hello there")).await;
    assert_eq!(status, 200, "{first}");
    let one_call = cost(&first);
    assert!(one_call > 0.0 && one_call < 0.1, "{one_call}");
    let runs = (0..20).map(|i| {
        let (s, key) = if i % 2 == 0 { (&a, ALICE) } else { (&b, BOB) };
        post(s, "/v1/chat/completions", key, chat("hello there"))
    });
    let results = futures::future::join_all(runs).await;
    let refused: Vec<&Value> = results
        .iter()
        .filter(|r| r.0 == 429)
        .map(|r| &r.2)
        .collect();
    let served = results.iter().filter(|r| r.0 == 200).count();
    assert_eq!(served + refused.len(), 20, "{results:?}");
    assert!(
        !refused.is_empty(),
        "a budget of about 10 calls refused none of 21"
    );
    assert_eq!(
        refused[0]["error"]["code"], "budget_exceeded",
        "{}",
        refused[0]
    );
    assert_eq!(refused[0]["error"]["details"]["budget"], "team");
    let budgets = get(&b, "/v1/budgets", ALICE).await;
    let spent = budgets["data"][0]["spent"].as_f64().unwrap();
    assert!(
        spent <= 0.5 + one_call + 1e-9,
        "spent {spent}, one call {one_call}: {budgets}"
    );
    assert!(
        (spent - (served + 1) as f64 * one_call).abs() < 1e-6,
        "{spent} for {} calls",
        served + 1
    );
}

#[tokio::test]
async fn a_budget_survives_a_restart_and_refuses_in_every_face_s_shape() {
    let model = MockLlm::start().await;
    let dir = config(
        &model,
        "    - name: bob-daily\n      for: { key: bob }\n      limit: { usd: 0.01 }\n      period: day\n      warn_at: 50",
        "",
    );
    let mut s = Server::start(dir.path(), &ENV).await;
    let (status, headers, answer) =
        post(&s, "/v1/chat/completions", BOB, chat("hello there")).await;
    assert_eq!(status, 200, "{answer}");
    let first = cost(&answer);
    assert!(first >= 0.01, "the first call spends the budget: {first}");
    assert_eq!(
        headers["x-toolgate-cost"].to_str().unwrap(),
        format!("{first:.6}")
    );
    // A graceful stop writes the store; the next process reads it.
    s.signal(nix::sys::signal::Signal::SIGTERM);
    s.exited().await;
    assert!(dir.path().join(".toolgate/spend/spend.json").exists());
    let s = Server::start(dir.path(), &ENV).await;
    let refusals = [
        ("/v1/chat/completions", chat("hi")),
        (
            "/v1/responses",
            json!({"model": "mock-model", "input": "hi"}),
        ),
        (
            "/v1/messages",
            json!({"model": "mock-model", "max_tokens": 100, "messages": user("hi")}),
        ),
        (
            "/v1beta/models/mock-model:generateContent",
            json!({"contents": [{"parts": [{"text": "hi"}]}]}),
        ),
    ];
    for (path, body) in refusals {
        let (status, headers, err) = post(&s, path, BOB, body).await;
        assert_eq!(status, 429, "{path}: {err}");
        let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=86_400).contains(&retry), "{retry}");
        let message = match path {
            "/v1/messages" => {
                assert_eq!(err["error"]["type"], "rate_limit_error", "{err}");
                &err["error"]["message"]
            }
            p if p.starts_with("/v1beta") => {
                assert_eq!(err["error"]["status"], "RESOURCE_EXHAUSTED", "{err}");
                &err["error"]["message"]
            }
            _ => {
                assert_eq!(err["error"]["code"], "budget_exceeded", "{err}");
                assert_eq!(err["error"]["details"]["limit"], 0.01, "{err}");
                &err["error"]["message"]
            }
        };
        let message = message.as_str().unwrap();
        assert!(
            message.contains("bob-daily") && message.contains("resets at"),
            "{message}"
        );
    }
    // alice has no budget; the spend API shows both keys' calls, a
    // request passed through untouched (no tools) among them, its usage
    // read from the answer as it went by.
    let (status, _, _) = post(&s, "/v1/chat/completions", ALICE, chat("hello")).await;
    assert_eq!(status, 200);
    let mut untouched = chat("hello");
    untouched["tool_set"] = json!("none");
    let (status, _, answer) = post(&s, "/v1/chat/completions", ALICE, untouched).await;
    assert_eq!(status, 200);
    assert!(answer.get("toolgate").is_none(), "passed through: {answer}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let by_key = loop {
        let by_key = get(&s, "/v1/spend?group_by=key", ALICE).await;
        if by_key["data"][0]["model_calls"] == 2 {
            break by_key;
        }
        assert!(tokio::time::Instant::now() < deadline, "{by_key}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(
        by_key["data"][0]["input_tokens"].as_i64().unwrap() > 0,
        "{by_key}"
    );
    let keys: Vec<&str> = by_key["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["alice", "bob"], "{by_key}");
    let bob = &by_key["data"][1];
    assert_eq!(
        (bob["model_calls"].as_i64(), bob["cost_usd"].as_f64()),
        (Some(1), Some(first)),
        "{by_key}"
    );
    // bob sees his own alone.
    let own = get(&s, "/v1/spend?group_by=key", BOB).await;
    assert_eq!(own["data"].as_array().unwrap().len(), 1, "{own}");
    let budgets = get(&s, "/v1/budgets", BOB).await;
    assert_eq!(budgets["data"][0]["left"], 0.0, "{budgets}");
}

#[tokio::test]
async fn a_loop_that_spends_its_budget_runs_no_more_tools_and_answers() {
    let model = MockLlm::start().await;
    let dir = config(
        &model,
        "    - name: tiny\n      for: { key: \"*\" }\n      limit: { tokens: 20 }",
        "",
    );
    let s = Server::start(dir.path(), &ENV).await;
    let script = r#"call calculator {"expression": "6*7"} then calculator {"expression": "1+1"}"#;
    let mut body = chat(script);
    body["tool_set"] = json!("default");
    let (status, headers, answer) = post(&s, "/v1/chat/completions", BOB, body).await;
    assert_eq!(status, 200, "{answer}");
    let report = &answer["toolgate"];
    assert_eq!(report["finish_reason"], "budget_exceeded", "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(report["tool_calls"], json!([]), "no tool ran: {report}");
    assert_eq!(report["iterations"], 1);
    let text = answer["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("tiny"), "{text}");
    assert!(headers.contains_key("x-toolgate-cost"));
    // The tools it did run are counted by tool (the spend API).
    let (status, _, _) = post(
        &s,
        "/v1/tools/calculator/invoke",
        ALICE,
        json!({"arguments": {"expression": "2+2"}}),
    )
    .await;
    assert_eq!(status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let tools = get(&s, "/v1/spend?group_by=tool,key", ALICE).await;
    let row = tools["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tool"] == "calculator")
        .unwrap();
    assert_eq!(
        (row["key"].as_str(), row["tool_calls"].as_i64()),
        (Some("alice"), Some(1)),
        "{tools}"
    );
}
