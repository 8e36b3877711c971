//! `builtins:` of `toolgate.yaml` checked: which builtins are enabled
//! (with their timeouts) and whether their settings are usable.

use toolgate::NativeTool;
use toolgate_builtins::{process, python};
use toolgate_config::load::Loaded;
use toolgate_config::{Diagnostic, GatewayFile};

/// The builtins `toolgate.yaml` enables, in the order of [`toolgate_builtins::all`], with
/// their timeouts from the settings; every bad name or setting is reported.
pub(crate) fn select(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) -> Vec<NativeTool> {
    let decl = &file.value.builtins;
    check_settings(file, diags);
    let available = toolgate_builtins::all();
    let mut wanted: Vec<&str> = Vec::new();
    for (i, name) in decl.enabled.iter().enumerate() {
        let at = file.pos(&format!("builtins.enabled[{i}]"));
        if !available.iter().any(|t| t.name == name) {
            let names: Vec<&str> = available.iter().map(|t| t.name).collect();
            diags.push(Diagnostic::error(
                &file.file,
                at,
                format!("there is no builtin tool `{name}`"),
                format!("name one of: {}", names.join(", ")),
            ));
        } else if wanted.contains(&name.as_str()) {
            diags.push(Diagnostic::error(
                &file.file,
                at,
                format!("builtin `{name}` is enabled twice"),
                "remove one of the two",
            ));
        } else {
            wanted.push(name);
        }
    }
    available
        .into_iter()
        .filter(|t| wanted.contains(&t.name))
        .map(|t| match t.name {
            "exec" => t.with_timeout(decl.exec.timeout + toolgate_builtins::GRACE),
            "execute_python" => t.with_timeout(
                python::level_timeout(decl.python.strictness) + toolgate_builtins::GRACE,
            ),
            "web_fetch" => t.with_timeout(decl.web_fetch.timeout + toolgate_builtins::GRACE),
            _ => t,
        })
        .collect()
}

fn check_settings(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let decl = &file.value.builtins;
    let mut err = |path: &str, message: String, hint: &str| {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos(&format!("builtins.{path}")),
            message,
            hint,
        ));
    };
    if decl.workspace.as_os_str().is_empty() {
        err(
            "workspace",
            "the workspace is empty".into(),
            "name a folder, e.g. `workspace`",
        );
    }
    if decl.exec.timeout.is_zero() {
        err(
            "exec.timeout",
            "the timeout is zero".into(),
            "give a duration such as `60s`",
        );
    }
    if decl.exec.shell.trim().is_empty() {
        err(
            "exec.shell",
            "the shell is empty".into(),
            "name a shell, e.g. `sh`",
        );
    }
    for (path, value) in [
        ("exec.max_output_chars", decl.exec.max_output_chars),
        ("python.max_output_chars", decl.python.max_output_chars),
        ("web_fetch.max_chars", decl.web_fetch.max_chars),
        ("web_fetch.max_bytes", decl.web_fetch.max_bytes),
    ] {
        if value == 0 {
            err(path, "the limit is zero".into(), "give a positive number");
        }
    }
    if decl.web_fetch.timeout.is_zero() {
        err(
            "web_fetch.timeout",
            "the timeout is zero".into(),
            "give a duration such as `20s`",
        );
    }
    if decl.python.memory_mb < 32 {
        err(
            "python.memory_mb",
            format!(
                "{} MiB is too little for a Python interpreter",
                decl.python.memory_mb
            ),
            "give at least 32 (MiB)",
        );
    }
    if decl.python.interpreter.trim().is_empty() {
        err(
            "python.interpreter",
            "the interpreter is empty".into(),
            "name it, e.g. `python3`",
        );
    }
    for (level, modules) in [
        ("standard", &decl.python.extra_modules.standard),
        ("strict", &decl.python.extra_modules.strict),
    ] {
        if let Some(m) = modules.first() {
            err(
                &format!("python.extra_modules.{level}"),
                format!(
                    "`{level}` runs on the gateway's own interpreter, which has no file, network or process access and only its own modules ({}); `{m}` cannot be added to it",
                    python::INTERPRETER_MODULES.join(", ")
                ),
                "remove the list, or use `strictness: lenient` (CPython in the sandbox) for modules such as this one",
            );
        }
    }
    let runs_code = decl
        .enabled
        .iter()
        .any(|n| n == "exec" || n == "execute_python");
    if runs_code && let Err(e) = process::Sandbox::resolve(&decl.sandbox) {
        err(
            "sandbox.user",
            e,
            "name an unprivileged user that exists here (e.g. `nobody`), or a uid",
        );
    }
    if decl.sandbox.max_processes == 0 {
        err(
            "sandbox.max_processes",
            "sandbox.max_processes is 0, so no command could start".into(),
            "give the most processes code may have at once, e.g. 64",
        );
    }
    if decl.sandbox.memory_mb < 16 {
        err(
            "sandbox.memory_mb",
            format!(
                "sandbox.memory_mb is {}, too little for a shell to start",
                decl.sandbox.memory_mb
            ),
            "give each process of the code at least 16 MiB, e.g. 1024",
        );
    }
    for (field, value) in [
        ("max_tasks", decl.spawn.max_tasks),
        ("concurrency", decl.spawn.concurrency),
        ("max_iterations", decl.spawn.max_iterations as usize),
    ] {
        if value == 0 {
            err(
                &format!("spawn.{field}"),
                format!("spawn.{field} must be at least 1"),
                "give a whole number of at least 1",
            );
        }
    }
    if runs_code && decl.sandbox.allow_unconfined {
        diags.push(Diagnostic::warning(
            &file.file,
            file.pos("builtins.sandbox.allow_unconfined"),
            "`exec` and lenient Python will run even where they cannot be confined (no namespaces, no Landlock): code would then see every file and network the gateway's user sees",
            "remove `allow_unconfined` unless this machine cannot confine and the code is trusted",
        ));
    }
}
