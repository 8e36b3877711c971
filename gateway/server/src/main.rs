//! The `toolgate` binary.

/// mimalloc instead of the system allocator: a proxied request allocates
/// and frees many small buffers across threads, where glibc's malloc cost
/// 17% of the gateway's CPU under load (docs/benchmarks.md). Asked for an
/// alignment only when its plain blocks lack it (`toolgate_alloc`). The
/// `system-alloc` feature leaves the system's allocator in place, for a heap
/// profiler that intercepts `malloc` (docs/benchmarks.md).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: toolgate_alloc::Mimalloc = toolgate_alloc::Mimalloc;

fn main() -> std::process::ExitCode {
    toolgate_server::cli::main()
}
