//! A fake model of one protocol as a server, following the scripted
//! model's script: `fake-model PROTOCOL [ADDR]` (PROTOCOL: `anthropic`).
//! It prints where it listens; `GET /fake/requests` and `/fake/refusals`
//! tell what it was sent and what it refused.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use toolgate_tests::fakes::Brain;
use toolgate_tests::fakes::anthropic::FakeAnthropic;

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
        other => panic!("no fake of protocol {other:?}"),
    }
}
