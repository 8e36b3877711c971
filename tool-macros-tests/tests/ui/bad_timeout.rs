use tool_macros::tool;

/// Forecast.
#[tool(timeout = "soon")]
fn forecast(city: String) -> String {
    city
}

fn main() {}
