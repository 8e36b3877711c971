//! The scripted model as a server: `mock-llm [ADDR]` (default
//! 127.0.0.1:8089). `make run` starts it when no real upstream is set.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8089".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
    println!(
        "scripted model listening on http://{}/v1",
        listener.local_addr().unwrap()
    );
    toolgate_tests::mock_llm::serve_forever(listener).await;
}
