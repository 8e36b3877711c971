//! The `toolgate` binary.

fn main() -> std::process::ExitCode {
    toolgate_server::cli::main()
}
