//! `openapi:` entries of tool files, expanded into the HTTP tools they
//! describe before the catalog is built: each description is read (a file
//! of the configuration folder, or an http(s) URL) and imported by
//! `toolgate-openapi`; its tools join the file's declared ones, positioned
//! at the entry.

use toolgate_config::{Diagnostic, RawConfig};

/// Imports every `openapi:` entry of `raw`'s tool files, reading URLs with
/// `fetch`. Problems are appended to `diags`: an error for a description
/// that cannot be read or imported, a warning naming operations that are
/// not tools.
pub fn expand(
    raw: &mut RawConfig,
    fetch: &dyn Fn(&str) -> Result<String, String>,
    diags: &mut Vec<Diagnostic>,
) {
    for file in 0..raw.tool_files.len() {
        let entries: Vec<(usize, toolgate_config::format::OpenApiDecl)> = raw.tool_files[file]
            .value
            .openapi
            .iter()
            .enumerate()
            .filter_map(|(j, d)| d.clone().map(|d| (j, d)))
            .collect();
        for (j, decl) in entries {
            let loaded = &raw.tool_files[file];
            let at = format!("openapi[{j}]");
            let imported = match import(&raw.dir, &decl, fetch) {
                Ok(imported) => imported,
                Err(e) => {
                    diags.push(Diagnostic::error(
                        &loaded.file,
                        loaded.pos(&format!("{at}.spec")),
                        format!("cannot import `{}`: {e}", decl.spec),
                        "give the path of an OpenAPI 3.x or Swagger 2.0 file, relative to the configuration folder, or its http(s) URL",
                    ));
                    continue;
                }
            };
            if !imported.skipped.is_empty() {
                let shown: Vec<&str> = imported
                    .skipped
                    .iter()
                    .take(3)
                    .map(String::as_str)
                    .collect();
                let more = if imported.skipped.len() > shown.len() {
                    "; …"
                } else {
                    ""
                };
                diags.push(Diagnostic::warning(
                    &loaded.file,
                    loaded.pos(&at),
                    format!(
                        "{} operations of `{}` are not tools: {}{more}",
                        imported.skipped.len(),
                        decl.spec,
                        shown.join("; "),
                    ),
                    format!("`toolgate import openapi {}` lists them all", decl.spec),
                ));
            }
            let tools = imported.tools.into_iter().map(|t| t.decl).collect();
            let env = imported.env.into_iter().map(|(name, _)| name);
            raw.add_imported(file, j, tools, env, diags);
        }
    }
}

/// The description `decl` names, imported.
fn import(
    dir: &std::path::Path,
    decl: &toolgate_config::format::OpenApiDecl,
    fetch: &dyn Fn(&str) -> Result<String, String>,
) -> Result<toolgate_openapi::Imported, String> {
    let options = toolgate_openapi::Options {
        include: decl.include.clone(),
        exclude: decl.exclude.clone(),
        prefix: decl.prefix.clone(),
        server: decl.server.clone(),
        auth_env: decl.auth_env.clone(),
    };
    if decl.spec.starts_with("https://") || decl.spec.starts_with("http://") {
        let text = fetch(&decl.spec)?;
        return toolgate_openapi::import_text(&text, &options).map_err(|e| e.to_string());
    }
    if decl.spec.contains("://") {
        return Err("only http(s) URLs and files are read".to_owned());
    }
    toolgate_openapi::import_file(&dir.join(&decl.spec), &options).map_err(|e| {
        // Paths in the message relative to the folder, as in every other
        // diagnostic.
        e.to_string().replace(&format!("{}/", dir.display()), "")
    })
}
