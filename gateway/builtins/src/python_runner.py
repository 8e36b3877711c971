# The runner of toolgate's `execute_python` tool. It runs in its own
# `python3 -I` process (own process group, clean environment, the workspace
# as working directory), reads the settings as JSON from argv[1] and the code
# from stdin, sets resource limits, and for the `standard` and `strict`
# levels checks the code's syntax tree, removes dangerous builtins and only
# lets the code import allowed modules.
#
# This in-process policy is defence in depth, NOT a security boundary:
# Python offers many ways around an allow-list. What bounds the code is the
# separate process, its limits (memory, CPU, file size, timeout with the
# whole group killed) and the rights of the user running the gateway.
#
# Exit codes: the code's own, 1 for an uncaught exception, 3 when the policy
# refused something.
import ast
import builtins
import json
import resource
import sys
import traceback

REFUSED = 3

cfg = json.loads(sys.argv[1])
level = cfg["level"]
allowed = cfg.get("allowed")
code = sys.stdin.read()


def limit(which, value):
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        pass


if cfg.get("memory_bytes"):
    limit(resource.RLIMIT_AS, cfg["memory_bytes"])
if cfg.get("cpu_seconds"):
    limit(resource.RLIMIT_CPU, cfg["cpu_seconds"])
limit(resource.RLIMIT_CORE, 0)
limit(resource.RLIMIT_FSIZE, cfg.get("file_bytes", 64 * 1024 * 1024))


class PolicyError(ImportError):
    pass


def refuse(message):
    print(f"refused ({level}): {message}", file=sys.stderr)
    sys.exit(REFUSED)


namespace = {"__name__": "__main__"}

if level != "lenient":
    try:
        tree = ast.parse(code, "<code>", "exec")
    except SyntaxError:
        tree = None  # compile() below reports it with the usual message
    if tree is not None:
        for node in ast.walk(tree):
            line = getattr(node, "lineno", "?")
            if isinstance(node, ast.Attribute):
                private = node.attr.startswith("__") if level == "standard" else node.attr.startswith("_")
                if private:
                    refuse(f"line {line}: access to attribute `{node.attr}` is not allowed")
            elif isinstance(node, ast.Name) and node.id in cfg["banned_names"]:
                refuse(f"line {line}: `{node.id}` is not allowed")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    refuse(f"line {line}: relative imports are not allowed")
                for alias in node.names:
                    if alias.name.startswith("_") or alias.name == "*":
                        refuse(f"line {line}: `from {node.module} import {alias.name}` is not allowed")

    allowed_set = set(allowed or [])
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level_=0):
        top = name.split(".")[0]
        if level_ != 0:
            raise PolicyError("relative imports are not allowed")
        if name not in allowed_set and top not in allowed_set:
            raise PolicyError(
                f"import of '{name}' is not allowed at strictness {level}; "
                f"allowed modules: {', '.join(sorted(allowed_set))}"
            )
        return real_import(name, globals, locals, fromlist, level_)

    safe = dict(vars(builtins))
    for name in cfg["banned_builtins"]:
        safe.pop(name, None)
    safe["__import__"] = guarded_import
    namespace["__builtins__"] = safe

try:
    compiled = compile(code, "<code>", "exec")
except SyntaxError as e:
    traceback.print_exception(type(e), e, None)
    sys.exit(1)

try:
    exec(compiled, namespace)
except SystemExit:
    raise
except PolicyError as e:
    refuse(str(e))
except BaseException as e:  # noqa: BLE001 - report whatever the code raised
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.exit(1)
