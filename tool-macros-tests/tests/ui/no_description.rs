use tool_macros::tool;

#[tool]
fn forecast(city: String) -> String {
    city
}

fn main() {}
