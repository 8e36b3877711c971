//! Misuse of `#[tool]` is a compile error pointing at the offending token.

#[test]
fn misuse_is_a_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
