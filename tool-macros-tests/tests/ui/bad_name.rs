use tool_macros::tool;

/// Forecast.
#[tool(name = "get forecast")]
fn forecast(city: String) -> String {
    city
}

fn main() {}
