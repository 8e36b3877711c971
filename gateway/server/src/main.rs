//! The `toolgate` binary.

/// mimalloc instead of the system allocator: a proxied request allocates
/// and frees many small buffers across threads, where glibc's malloc cost
/// 17% of the gateway's CPU under load (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolgate_server::cli::main()
}
