//! The worker process confines itself once it has read its program, before
//! the interpreter runs a line of it:
//!
//! - `no_new_privs`, so nothing it could execute gains rights;
//! - Landlock with every file-system and TCP right handled and none granted,
//!   and signals and abstract sockets scoped to itself (where the kernel has
//!   Landlock; reported as best effort);
//! - a seccomp filter refusing (`EPERM`) the system calls that open files,
//!   make sockets, start processes or programs, signal other processes,
//!   trace or read other processes' memory, or change namespaces;
//! - resource limits: its data segment (memory), CPU seconds, no file
//!   writes (`RLIMIT_FSIZE` 0), no core dumps, no new descriptors.
//!
//! The gateway also starts it with an empty environment, `/` as working
//! directory, another user when the gateway runs as root, and kills it at
//! its deadline.

use std::collections::BTreeMap;

use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetStatus, Scope};
use rlimit::Resource;
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

use crate::protocol::WorkerLimits;

/// How far the confinement went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landlock {
    Full,
    Partial,
    Unavailable,
}

/// Confines the current process for a program with `limits`. Fails when
/// the seccomp filter or a limit cannot be set: the worker then refuses to
/// run the program.
pub fn confine(limits: &WorkerLimits) -> Result<Landlock, String> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    let landlock = landlock().unwrap_or(Landlock::Unavailable);
    let cpu = limits.time_ms.div_ceil(1000).saturating_add(1);
    for (resource, value) in [
        (Resource::DATA, limits.memory_bytes),
        (Resource::CPU, cpu),
        (Resource::FSIZE, 0),
        (Resource::CORE, 0),
        // The three standard streams are all it has and all it needs.
        (Resource::NOFILE, 3),
    ] {
        resource
            .set(value, value)
            .map_err(|e| format!("{resource:?} limit: {e}"))?;
    }
    let filter = seccomp_filter()?;
    seccompiler::apply_filter(&filter).map_err(|e| format!("seccomp: {e}"))?;
    Ok(landlock)
}

fn landlock() -> Result<Landlock, landlock::RulesetError> {
    let abi = ABI::V6;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))?
        .handle_access(AccessNet::from_all(abi))?
        .scope(Scope::from_all(abi))?
        .create()?
        .restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Landlock::Full,
        RulesetStatus::PartiallyEnforced => Landlock::Partial,
        RulesetStatus::NotEnforced => Landlock::Unavailable,
    })
}

/// The system calls a program's process never needs once it runs, besides
/// [`CHILD_DENIED`].
const DENIED: &[libc::c_long] = &[
    // files
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_mkdirat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_fchmodat,
    libc::SYS_fchownat,
    libc::SYS_truncate,
    libc::SYS_memfd_create,
    // network
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_accept,
    libc::SYS_accept4,
    // processes and programs
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_kill,
    libc::SYS_pidfd_open,
    // its own limits
    libc::SYS_setrlimit,
    libc::SYS_prlimit64,
    // (and all of CHILD_DENIED: tracing, namespaces, the system)
];

/// Their older forms, which only some architectures have (aarch64 has
/// only the `*at` forms above).
#[cfg(target_arch = "x86_64")]
const DENIED_LEGACY: &[libc::c_long] = &[
    libc::SYS_open,
    libc::SYS_creat,
    libc::SYS_mkdir,
    libc::SYS_unlink,
    libc::SYS_rename,
    libc::SYS_link,
    libc::SYS_symlink,
    libc::SYS_chmod,
    libc::SYS_chown,
    libc::SYS_fork,
    libc::SYS_vfork,
];
#[cfg(not(target_arch = "x86_64"))]
const DENIED_LEGACY: &[libc::c_long] = &[];

fn seccomp_filter() -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp on {}: {e}", std::env::consts::ARCH))?;
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> = DENIED
        .iter()
        .chain(CHILD_DENIED)
        .chain(DENIED_LEGACY)
        .map(|nr| (*nr, Vec::new()))
        .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("seccomp program: {e}"))
}

/// The system calls a command run by `exec` or lenient Python never
/// needs, refused (`EPERM`) by `toolgate confine`: tracing or reading other
/// processes, namespaces and mounts, the kernel's keyrings, BPF,
/// performance counters, modules, io_uring (whose operations a filter
/// cannot see), `userfaultfd`, and the machine's own switches.
const CHILD_DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_kcmp,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_setns,
    libc::SYS_unshare,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_lookup_dcookie,
];

/// The namespace flags of `clone`: a child may start processes, not new
/// namespaces.
const CLONE_NAMESPACES: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// The filters `toolgate confine` installs before it becomes the command:
/// [`CHILD_DENIED`] and `clone` with a namespace flag refused (`EPERM`);
/// `clone3`, whose flags a filter cannot read, answered `ENOSYS` so that
/// the C library falls back to `clone`, whose flags it can.
fn child_seccomp() -> Result<[BpfProgram; 2], String> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp on {}: {e}", std::env::consts::ARCH))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        CHILD_DENIED.iter().map(|nr| (*nr, Vec::new())).collect();
    let namespaces = CLONE_NAMESPACES
        .iter()
        .map(|flag| {
            SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(*flag),
                *flag,
            )
            .and_then(|c| SeccompRule::new(vec![c]))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("seccomp rule: {e}"))?;
    rules.insert(libc::SYS_clone, namespaces);
    let program = |rules, action| -> Result<BpfProgram, String> {
        SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
            .map_err(|e| format!("seccomp filter: {e}"))?
            .try_into()
            .map_err(|e: seccompiler::BackendError| format!("seccomp program: {e}"))
    };
    Ok([
        program(rules, SeccompAction::Errno(libc::EPERM as u32))?,
        program(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Errno(libc::ENOSYS as u32),
        )?,
    ])
}

/// The exit code of `toolgate confine` when it could not confine and was
/// not allowed to run unconfined.
pub const NOT_CONFINED: i32 = 125;

/// What `toolgate confine` was asked for.
#[derive(Debug, Default, PartialEq, Eq)]
struct ChildArgs {
    read: Vec<String>,
    write: Vec<String>,
    network: bool,
    allow_unconfined: bool,
    command: Vec<String>,
}

fn parse_child_args(args: &[String]) -> Result<ChildArgs, String> {
    let mut out = ChildArgs::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--read" => out
                .read
                .push(it.next().ok_or("--read needs a path")?.clone()),
            "--write" => out
                .write
                .push(it.next().ok_or("--write needs a path")?.clone()),
            "--network" => out.network = true,
            "--allow-unconfined" => out.allow_unconfined = true,
            "--" => {
                out.command = it.cloned().collect();
                break;
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if out.command.is_empty() {
        return Err("no command after `--`".into());
    }
    Ok(out)
}

/// `toolgate confine [--read P]… [--write P]… [--network]
/// [--allow-unconfined] -- command…`: confines itself with Landlock —
/// reading and running only below the `--read` paths, writing only below
/// the `--write` paths, no TCP unless `--network`, signals and abstract
/// sockets only within — and a seccomp filter (the system calls no
/// command needs: tracing, new namespaces, mounts, keyrings and the like),
/// then becomes `command`. Exits with
/// [`NOT_CONFINED`] when Landlock is not there, unless allowed to run
/// unconfined.
pub fn child_main(args: &[String]) -> i32 {
    use std::os::unix::process::CommandExt;
    let args = match parse_child_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("toolgate confine: {e}");
            return 2;
        }
    };
    match confine_child(&args) {
        Ok(RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced) => {}
        Ok(RulesetStatus::NotEnforced) if !args.allow_unconfined => {
            eprintln!(
                "toolgate confine: this kernel has no Landlock, so the command cannot be confined to the workspace; set builtins.sandbox.allow_unconfined: true to run it anyway"
            );
            return NOT_CONFINED;
        }
        Err(e) if !args.allow_unconfined => {
            eprintln!("toolgate confine: the command cannot be confined: {e}");
            return NOT_CONFINED;
        }
        _ => {}
    }
    let e = std::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .exec();
    eprintln!("toolgate confine: cannot run `{}`: {e}", args.command[0]);
    127
}

fn confine_child(args: &ChildArgs) -> Result<RulesetStatus, String> {
    use landlock::{RulesetCreatedAttr, path_beneath_rules};
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    let abi = ABI::V6;
    let fail = |e: landlock::RulesetError| e.to_string();
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?;
    if !args.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(fail)?;
    }
    let status = ruleset
        .scope(Scope::from_all(abi))
        .map_err(fail)?
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(&args.read, AccessFs::from_read(abi)))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&args.write, AccessFs::from_all(abi)))
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    for filter in child_seccomp()? {
        seccompiler::apply_filter(&filter).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(status.ruleset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn child_arguments_are_read_whole_or_refused() {
        let a = parse_child_args(&strings(&[
            "--read",
            "/usr",
            "--write",
            "/ws",
            "--network",
            "--",
            "sh",
            "-c",
            "--read",
        ]))
        .unwrap();
        assert_eq!(a.read, ["/usr"]);
        assert_eq!(a.write, ["/ws"]);
        assert!(a.network && !a.allow_unconfined);
        assert_eq!(a.command, ["sh", "-c", "--read"]);
        assert!(parse_child_args(&strings(&["--read"])).is_err());
        assert!(parse_child_args(&strings(&["--read", "/usr"])).is_err());
        assert!(parse_child_args(&strings(&["--bogus", "--", "x"])).is_err());
    }
}
