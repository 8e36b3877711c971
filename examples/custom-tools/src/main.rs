//! A toolgate binary with tools of its own: the same gateway, CLI and
//! configuration as `toolgate`, plus the `#[tool]` functions of
//! [`tools`], which YAML tool sets can name like any other tool.
//!
//! ```sh
//! cargo run -p custom-tools -- tools --config examples/custom-tools/config
//! cargo run -p custom-tools -- call convert_temperature \
//!     --config examples/custom-tools/config --args '{"value": 100, "to": "fahrenheit"}'
//! cargo run -p custom-tools -- serve --config examples/custom-tools/config
//! ```

mod tools;

fn main() -> std::process::ExitCode {
    // One line per tool; removing a function without removing it here does
    // not compile.
    toolgate_server::cli::main_with(toolgate::tools![
        tools::convert_temperature,
        tools::whoami,
        tools::reverse,
    ])
}
