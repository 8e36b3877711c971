//! Native tools that misbehave: a panic, sync or async, becomes an error
//! result (never a crash), a slow one is cut by its timeout, and the next
//! call still works.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use toolgate::context::CallContext;
use toolgate::tool;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, ToolCall, http_client};
use toolgate_tests::ConfigDir;

/// Panics, synchronously.
#[tool]
fn boom_sync(
    /// Anything.
    x: u8,
) -> u8 {
    if x > 0 {
        panic!("sync kaboom {x}");
    }
    x
}

/// Panics, asynchronously.
#[tool]
async fn boom_async() -> Result<u8, String> {
    tokio::task::yield_now().await;
    panic!("async kaboom");
}

/// Never finishes in time.
#[tool(timeout = "200ms")]
async fn too_slow() -> u8 {
    tokio::time::sleep(Duration::from_secs(30)).await;
    1
}

fn call(name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: name.into(),
        name: name.into(),
        arguments,
    }
}

#[tokio::test]
async fn panics_and_timeouts_are_error_results() {
    let dir = ConfigDir::new(&[]);
    let natives = toolgate::tools![boom_sync, boom_async, too_slow];
    let catalog = Catalog::load_with(dir.path(), &|_| None, &natives).unwrap();
    let exec = Executor::new(http_client().unwrap());
    let ctx = CallContext::new();

    let r = exec
        .run(&catalog, &call("boom_sync", json!({"x": 3})), &ctx)
        .await;
    assert!(!r.success);
    let e = r.error.unwrap();
    assert_eq!(e.code(), "tool_crashed");
    assert!(e.to_string().contains("sync kaboom 3"), "{e}");

    let r = exec
        .run(&catalog, &call("boom_async", json!({})), &ctx)
        .await;
    assert_eq!(r.error.unwrap().code(), "tool_crashed");

    let r = exec.run(&catalog, &call("too_slow", json!({})), &ctx).await;
    assert_eq!(r.error.unwrap().code(), "timeout");

    // In one batch, the failures do not take the good call down.
    let results = exec
        .run_batch(
            &catalog,
            &[
                call("boom_async", json!({})),
                call("boom_sync", json!({"x": 0})),
            ],
            &ctx,
        )
        .await;
    assert!(!results[0].success);
    assert!(results[1].success);
    assert_eq!(results[1].data, Some(json!(0)));
}
