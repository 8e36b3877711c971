//! Trace context on the gateway's own requests (model calls, HTTP tools,
//! MCP calls' `_meta`): the binary that exports traces installs the
//! function that writes the current span's W3C `traceparent` (and
//! `tracestate`) into a request's headers; without one, nothing is added.
//! (Reading a client's `traceparent` happens at the HTTP edge, in the
//! server.)

use std::sync::OnceLock;

use http::HeaderMap;

static INJECT: OnceLock<fn(&mut HeaderMap)> = OnceLock::new();

/// Installs `inject` (once per process; later calls are ignored).
pub fn set_propagator(inject: fn(&mut HeaderMap)) {
    let _ = INJECT.set(inject);
}

/// Whether traces are propagated.
pub fn enabled() -> bool {
    INJECT.get().is_some()
}

/// Adds the current span's trace context to an outgoing request's headers.
pub fn inject(headers: &mut HeaderMap) {
    if let Some(inject) = INJECT.get() {
        inject(headers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_added_without_a_propagator() {
        let mut headers = HeaderMap::new();
        inject(&mut headers);
        assert!(headers.is_empty());
    }
}
