use toolgate::context::ToolContext;
use tool_macros::tool;

/// Who asks.
#[tool]
fn whoami(first: &ToolContext, second: &ToolContext) -> String {
    format!("{} {}", first.request_id, second.request_id)
}

fn main() {}
