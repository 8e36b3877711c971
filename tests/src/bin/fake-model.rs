//! A fake model of one protocol as a server, following the scripted
//! model's script: `fake-model PROTOCOL [ADDR]` (PROTOCOL: `anthropic`,
//! `openai_responses`, `gemini`; `FAKE_KEY` is a Responses or Gemini
//! fake's deployment key).
//! It prints where it listens; `GET /fake/requests` and `/fake/refusals`
//! tell what it was sent and what it refused.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use toolgate_tests::fakes::Brain;
use toolgate_tests::fakes::anthropic::FakeAnthropic;
use toolgate_tests::fakes::gemini::FakeGemini;
use toolgate_tests::fakes::openai_responses::FakeResponses;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let protocol = args.next().unwrap_or_else(|| "anthropic".to_owned());
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
    let local = listener.local_addr().unwrap();
    match protocol.as_str() {
        "anthropic" => {
            let _fake =
                FakeAnthropic::serve_on(listener, Brain::Script, None, b"anthropic-fake-key");
            println!("fake {protocol} model listening on http://{local}/v1");
            std::future::pending::<()>().await;
        }
        "openai_responses" => {
            // A second deployment, when asked: another key.
            let key = std::env::var("FAKE_KEY").unwrap_or_else(|_| "responses-fake-key".into());
            let _fake = FakeResponses::serve_on(listener, Brain::Script, key.as_bytes());
            println!("fake {protocol} model listening on http://{local}/v1");
            std::future::pending::<()>().await;
        }
        "gemini" => {
            let key = std::env::var("FAKE_KEY").unwrap_or_else(|_| "gemini-fake-key".into());
            let _fake = FakeGemini::serve_on(listener, Brain::Script, None, key.as_bytes());
            println!("fake {protocol} model listening on http://{local}/v1beta");
            std::future::pending::<()>().await;
        }
        other => panic!("no fake of protocol {other:?}"),
    }
}
