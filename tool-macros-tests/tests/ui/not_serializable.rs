use tool_macros::tool;

struct Opaque;

/// Make something opaque.
#[tool]
fn make(name: String) -> Result<Opaque, String> {
    let _ = name;
    Ok(Opaque)
}

fn main() {}
