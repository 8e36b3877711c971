use tool_macros::tool;

/// Add two numbers.
#[tool]
fn add((a, b): (i64, i64)) -> i64 {
    a + b
}

fn main() {}
