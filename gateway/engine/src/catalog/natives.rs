//! Registering native tools (enabled builtins, then the embedding binary's
//! own `#[tool]` functions) in the catalog: names checked, clashes with
//! YAML tools or with each other reported naming both, schemas compiled.

use std::collections::HashMap;
use std::sync::Arc;

use crate::tools::tool::native::NativeTool;
use crate::tools::tool::{Tool, ToolKind, ToolSpec, is_valid_name};
use toolgate_config::load::Loaded;
use toolgate_config::{Diagnostic, GatewayFile, Pos};

/// Registers `builtins` then `extra`; returns the usable tools in that
/// order. `yaml` maps each YAML tool's name to where it is declared.
/// Every native name is appended to `declared`.
pub(super) fn register(
    gateway: &Loaded<GatewayFile>,
    builtins: Vec<NativeTool>,
    extra: &[NativeTool],
    yaml: &HashMap<String, (String, Pos)>,
    declared: &mut Vec<String>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Arc<Tool>> {
    let mut out: Vec<Arc<Tool>> = Vec::new();
    let mut seen: HashMap<&'static str, String> = HashMap::new();
    for native in builtins.into_iter().chain(extra.iter().cloned()) {
        let what = describe(&native);
        // Where to point: the builtin's entry in `builtins.enabled`, or the
        // top of toolgate.yaml for the binary's own tools.
        let at = gateway
            .value
            .builtins
            .enabled
            .iter()
            .position(|n| n == native.name)
            .filter(|_| native.builtin)
            .map(|i| gateway.pos(&format!("builtins.enabled[{i}]")))
            .unwrap_or(Pos { line: 1, column: 1 });
        if !is_valid_name(native.name) {
            diags.push(Diagnostic::error(
                &gateway.file,
                at,
                format!("{what}: the name {:?} is invalid", native.name),
                "use 1-64 letters, digits, `_` or `-` (OpenAI's rule for function names)",
            ));
            continue;
        }
        if let Some((file, pos)) = yaml.get(native.name) {
            diags.push(Diagnostic::error(
                file,
                *pos,
                format!(
                    "tool `{}` is also registered as {what}",
                    native.name
                ),
                if native.builtin {
                    "rename the YAML tool, or remove the builtin from `builtins.enabled` in toolgate.yaml"
                } else {
                    "rename one of the two tools"
                },
            ));
            continue;
        }
        if let Some(first) = seen.get(native.name) {
            diags.push(Diagnostic::error(
                &gateway.file,
                at,
                format!(
                    "tool `{}` is registered twice: as {first} and as {what}",
                    native.name
                ),
                "rename one of the two functions (`#[tool(name = \"...\")]`) or leave one out",
            ));
            continue;
        }
        seen.insert(native.name, what.clone());
        let spec = ToolSpec {
            name: native.name.to_owned(),
            description: native.description.clone(),
            category: native.category.map(str::to_owned),
            parameters: native.parameters(),
            timeout: native.timeout,
            cache_ttl: native.cache_ttl.filter(|_| native.read_only),
            // `#[tool(read_only)]` is all a function says of itself.
            annotations: crate::tools::tool::Annotations {
                read_only_hint: Some(native.read_only),
                ..Default::default()
            },
            output_schema: None,
            origin: native.origin.to_owned(),
        };
        match Tool::new(spec, ToolKind::Native(Arc::new(native))) {
            Ok(tool) => {
                declared.push(tool.name.clone());
                out.push(Arc::new(tool));
            }
            Err(e) => diags.push(Diagnostic::error(
                &gateway.file,
                at,
                format!("{what}: its argument schema does not compile: {e}"),
                "fix the parameter types of the function",
            )),
        }
    }
    out
}

fn describe(native: &NativeTool) -> String {
    if native.builtin {
        format!("the builtin tool `{}` ({})", native.name, native.origin)
    } else {
        format!("the native tool `{}` ({})", native.name, native.origin)
    }
}
