use tool_macros::tool;

struct Weather;

impl Weather {
    /// Forecast.
    #[tool]
    fn forecast(&self, city: String) -> String {
        city
    }
}

fn main() {}
