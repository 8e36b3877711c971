//! Reading a URL the configuration names (an `openapi:` spec at load):
//! once per load, never on a request, within a size cap and a deadline.
//!
//! Loading is synchronous (a reload runs it on a blocking thread, the CLI
//! before serving), so the fetch runs on a thread of its own with a
//! one-thread runtime: it works whatever runtime, if any, the caller is on.

use std::time::Duration;

use futures::StreamExt;

/// The largest spec fetched (as for a spec read from a file).
pub const MAX_SPEC_BYTES: usize = 64 << 20;
/// The time a fetch may take, from connecting to the last byte.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The text at `url` (http or https; at most 5 redirects), or why not.
pub fn fetch(url: &str) -> Result<String, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime to fetch it: {e}"))?;
            runtime.block_on(async {
                tokio::time::timeout(FETCH_TIMEOUT, get(url))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "fetching it took longer than {}s",
                            FETCH_TIMEOUT.as_secs()
                        ))
                    })
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the fetch failed unexpectedly".to_owned()))
    })
}

async fn get(url: &str) -> Result<String, String> {
    let client = reqwest::Client::builder()
        .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::limited(5))
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("cannot fetch it: {}", e.without_url()))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("fetching it answered HTTP {status}"));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_SPEC_BYTES as u64)
    {
        return Err(format!("it is larger than {} MiB", MAX_SPEC_BYTES >> 20));
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("reading it failed: {}", e.without_url()))?;
        if body.len() + chunk.len() > MAX_SPEC_BYTES {
            return Err(format!("it is larger than {} MiB", MAX_SPEC_BYTES >> 20));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| "it is not UTF-8 text".to_owned())
}
