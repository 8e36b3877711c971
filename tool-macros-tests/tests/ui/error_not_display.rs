use tool_macros::tool;

#[derive(Debug)]
struct Oops;

/// Divide.
#[tool]
fn divide(a: f64, b: f64) -> Result<f64, Oops> {
    if b == 0.0 { Err(Oops) } else { Ok(a / b) }
}

fn main() {}
