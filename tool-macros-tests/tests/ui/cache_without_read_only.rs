use tool_macros::tool;

/// Forecast.
#[tool(cache = "5m")]
fn forecast(city: String) -> String {
    city
}

fn main() {}
