//! Nothing but a test, `tests/compile_fail.rs`: each misuse of `#[tool]`
//! in `tests/ui/` is a compile error pointing at the offending token. The
//! macro's other tests (the schemas it generates, how calls run) are the
//! SDK's, `gateway/sdk/tests/schemas.rs`.
