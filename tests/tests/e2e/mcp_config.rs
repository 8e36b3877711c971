//! `mcp_servers` declarations: what validation catches before any server is
//! started (every error with file:line:column and a hint), and how tool
//! sets may name MCP tools that are only known once the servers run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use toolgate_engine::catalog::Catalog;
use toolgate_tests::ConfigDir;

fn report(dir: &ConfigDir, env: &[(&str, &str)]) -> Result<Catalog, Vec<String>> {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Catalog::load_with_env(dir.path(), &|k| env.get(k).cloned())
        .map_err(|e| e.diagnostics.iter().map(ToString::to_string).collect())
}

const BROKEN: &str = r#"env:
  TOKEN: optional
tools:
  - name: web_lookup
    description: An HTTP tool.
    http: { url: "https://example.com/" }
mcp_servers:
  - name: no-command
    transport: stdio
  - name: mixed
    transport: http
    url: "ftp://example.com/mcp"
    command: server
    headers:
      Accept: text/plain
      X-Key: "{{ env.UNDECLARED }}"
  - name: bad names
    transport: stdio
    command: server
    cwd: does-not-exist
    timeout: 0s
    tools:
      prefix: "web lookup "
  - name: globs
    transport: stdio
    command: server
    tools:
      include: ["[oops", lookup]
  - name: literal
    transport: stdio
    command: server
    tools:
      include: [lookup, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]
      prefix: web_
  - name: literal
    transport: stdio
    command: other
    tools: { prefix: web_ }
  - name: typo
    transport: stdio
    commnd: server
"#;

#[test]
fn every_declaration_error_is_reported_with_its_position() {
    let dir = ConfigDir::new(&[("tools.d/mcp.yaml", BROKEN)]);
    let errors = report(&dir, &[]).unwrap_err();
    assert_eq!(
        errors,
        [
            "tools.d/mcp.yaml:9:16: error: a stdio MCP server needs a `command` — add `command:` (the program to run) and its `args`",
            "tools.d/mcp.yaml:12:10: error: \"ftp://example.com/mcp\" is not an http(s) URL — write it like http://127.0.0.1:8000/mcp",
            "tools.d/mcp.yaml:13:14: error: `command` is only for `transport: stdio` — remove it, or use `transport: stdio`",
            "tools.d/mcp.yaml:15:15: error: the header `Accept` is set by the MCP transport itself — remove it",
            "tools.d/mcp.yaml:16:14: error: the template reads `env.UNDECLARED`, which the file does not declare — add `UNDECLARED: optional` (or `required`) under the file's top-level `env`",
            "tools.d/mcp.yaml:17:11: error: MCP server name \"bad names\" is invalid — use 1-64 letters, digits, `_` or `-`",
            "tools.d/mcp.yaml:20:10: error: the working directory \"does-not-exist\" does not exist — give a folder relative to the configuration folder, or an absolute path",
            "tools.d/mcp.yaml:21:14: error: the duration is zero — give a duration such as `30s`, or remove it",
            "tools.d/mcp.yaml:23:15: error: the prefix \"web lookup \" is invalid — use at most 63 letters, digits, `_` or `-` (tool names are 1-64 of these)",
            "tools.d/mcp.yaml:28:17: error: the pattern is invalid: unclosed character class; missing ']' — use `*` for any characters and `?` for one",
            "tools.d/mcp.yaml:33:17: error: tool `web_lookup` of MCP server `literal` collides with the tool `web_lookup` declared at tools.d/mcp.yaml:4 — set a `tools.prefix` on the server, or rename one of the two",
            "tools.d/mcp.yaml:33:25: error: the name of tool `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa` would be too long: `web_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa` is 67 characters long, over the limit of 64 — use a shorter `tools.prefix`, or remove the tool from `include`",
            "tools.d/mcp.yaml:35:11: error: MCP server `literal` is also declared at tools.d/mcp.yaml:29:11 — rename one of the two servers",
            "tools.d/mcp.yaml:41:13: error: mcp_servers[6].commnd: unknown field `commnd`, expected one of `name`, `transport`, `command`, `args`, `env`, `cwd`, `url`, `headers`, `oauth`, `credentials`, `tools`, `timeout`, `startup_timeout`, `cache`, `required`, `on_change`, `pins`, `sampling` — remove the field or fix its spelling (`toolgate schema` lists every field)",
        ],
        "{errors:#?}"
    );
}

#[test]
fn headers_may_read_the_caller_and_nothing_else_of_the_request() {
    let dir = ConfigDir::new(&[(
        "tools.d/mcp.yaml",
        r#"mcp_servers:
  - name: remote
    transport: http
    url: http://127.0.0.1:9/mcp
    headers:
      X-Caller: "{{ request.key }}/{{ request.project }}"
      X-Body: "{{ request.body }}"
  - name: local
    transport: stdio
    command: /bin/true
    env:
      CALLER: "{{ request.key }}"
"#,
    )]);
    let errors = report(&dir, &[]).err().unwrap_or_default();
    assert_eq!(
        errors,
        [
            "tools.d/mcp.yaml:7:15: error: the template reads `request.body`, which does not exist here — headers of an MCP server may read `env.<variable>`, `request.key`, `request.project`, `request.subject` and `request.claims.<claim>`",
            "tools.d/mcp.yaml:12:15: error: the template reads `request.key`, which does not exist here — MCP server settings may only read `env.<variable>`",
        ]
    );
}

#[test]
fn servers_whose_tools_could_share_names_are_rejected() {
    let tools = r#"mcp_servers:
  - name: a
    transport: stdio
    command: a
  - name: b
    transport: http
    url: http://127.0.0.1:9/mcp
  - name: c
    transport: stdio
    command: c
    tools: { prefix: c_, include: [x, y] }
  - name: d
    transport: stdio
    command: d
    tools: { prefix: c_, include: [z] }
  - name: e
    transport: stdio
    command: e
    tools: { prefix: c_, include: [y] }
"#;
    let dir = ConfigDir::new(&[("tools.d/mcp.yaml", tools)]);
    let errors = report(&dir, &[]).unwrap_err();
    assert_eq!(
        errors,
        [
            "tools.d/mcp.yaml:5:9: error: MCP servers `a` (tools.d/mcp.yaml:2) and `b` both have no prefix, so their tools could get the same names — give each server its own `tools.prefix` (e.g. `time_`), or list each server's tools by name in `tools.include`",
            "tools.d/mcp.yaml:19:22: error: MCP servers `c` (tools.d/mcp.yaml:8) and `e` both have the prefix `c_`, so their tools could get the same names — give each server its own `tools.prefix` (e.g. `time_`), or list each server's tools by name in `tools.include`",
        ],
        "{errors:#?}"
    );
}

#[test]
fn tool_sets_name_mcp_tools_by_name_or_glob_before_they_are_known() {
    let tools = r#"mcp_servers:
  - name: everything
    transport: stdio
    command: server-everything
    tools: { prefix: everything_ }
  - name: time
    transport: stdio
    command: mcp-server-time
    tools: { include: [get_current_time], prefix: time_ }
"#;
    let dir = ConfigDir::new(&[
        ("tools.d/mcp.yaml", tools),
        (
            "tool-sets/ok.yaml",
            "name: ok\ntools: [\"everything_*\", everything_echo, \"time_*\", time_get_current_time, \"ev*\"]\n",
        ),
        (
            "tool-sets/bad.yaml",
            "name: bad\ntools: [\"search_*\", time_convert_time, other_echo]\n",
        ),
    ]);
    let errors = report(&dir, &[]).unwrap_err();
    assert_eq!(
        errors,
        [
            "tool-sets/bad.yaml:2:9: error: the pattern `search_*` matches no tool — fix the pattern or declare a tool it matches (`toolgate tools` lists them)",
            "tool-sets/bad.yaml:2:21: error: tool `time_convert_time` does not exist — declare it in tools.d/ or remove it (`toolgate tools` lists every tool)",
            "tool-sets/bad.yaml:2:40: error: tool `other_echo` does not exist — declare it in tools.d/ or remove it (`toolgate tools` lists every tool)",
        ],
        "{errors:#?}"
    );
    std::fs::remove_file(dir.path().join("tool-sets/bad.yaml")).unwrap();
    let catalog = report(&dir, &[]).unwrap();
    let set = catalog.set("ok").unwrap();
    let entries: Vec<&str> = set.mcp.iter().map(|p| p.entry.as_str()).collect();
    assert_eq!(
        entries,
        [
            "everything_*",
            "everything_echo",
            "time_*",
            "time_get_current_time",
            "ev*"
        ]
    );
    // Not started: nothing usable yet, and the tools are reported unavailable.
    assert_eq!(catalog.tools_in(set, None).count(), 0);
    let unavailable: Vec<String> = catalog
        .unavailable_in(set, None)
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(unavailable, ["mcp:everything", "time_get_current_time"]);
    assert!(catalog.summary().contains("2 MCP servers"));
}

#[test]
fn an_unset_optional_variable_disables_the_server() {
    let tools = r#"env:
  API_TOKEN: optional
  NEEDED: required
mcp_servers:
  - name: remote
    transport: http
    url: http://127.0.0.1:9/mcp
    headers:
      Authorization: "Bearer {{ env.API_TOKEN }}"
    tools: { include: [search], prefix: remote_ }
"#;
    let dir = ConfigDir::new(&[("tools.d/remote.yaml", tools)]);
    let errors = report(&dir, &[]).unwrap_err();
    assert_eq!(
        errors,
        [
            "tools.d/remote.yaml:3:11: error: required environment variable NEEDED is not set — set it, or mark it `optional` to disable the tools that use it instead",
            "tools.d/remote.yaml:5:11: warning: MCP server `remote` is disabled: environment variable API_TOKEN is not set — set API_TOKEN and reload to enable it",
        ]
    );
    let catalog = report(&dir, &[("NEEDED", "1")]).unwrap();
    let u = catalog.unavailable_tool("remote_search").unwrap();
    assert_eq!(
        u.reason,
        "MCP server `remote` is disabled: environment variable API_TOKEN is not set"
    );
    assert_eq!(catalog.mcp().reports()[0].status, "disabled");
}

#[test]
fn the_schema_describes_mcp_servers() {
    let schemas = toolgate_config::format::json_schemas();
    let tools = &schemas["tools.d/*.yaml"];
    let text = tools.to_string();
    assert!(tools["properties"]["mcp_servers"].is_object(), "{text}");
    for field in [
        "transport",
        "command",
        "headers",
        "startup_timeout",
        "prefix",
    ] {
        assert!(text.contains(&format!("\"{field}\"")), "{field} missing");
    }
}
