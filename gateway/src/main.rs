//! The `toolgate` binary.

fn main() -> std::process::ExitCode {
    gateway::cli::main()
}
