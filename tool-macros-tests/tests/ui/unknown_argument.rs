use tool_macros::tool;

/// Forecast.
#[tool(nmae = "forecast")]
fn forecast(city: String) -> String {
    city
}

fn main() {}
