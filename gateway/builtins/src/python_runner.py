# The runner of toolgate's `execute_python` tool at the `lenient` level (the
# `standard` and `strict` levels run on the gateway's own interpreter, which
# has no OS access). It runs in its own `python3 -I` process inside the
# children's sandbox (see process.rs: namespaces, a workspace-only view of
# the files, no network unless configured, a clean environment), reads its
# limits as JSON from argv[1] and the code from stdin, sets the limits and
# runs the code.
#
# Exit codes: the code's own, 1 for an uncaught exception.
import json
import resource
import sys
import traceback

cfg = json.loads(sys.argv[1])
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

namespace = {"__name__": "__main__"}

try:
    compiled = compile(code, "<code>", "exec")
except SyntaxError as e:
    traceback.print_exception(type(e), e, None)
    sys.exit(1)

try:
    exec(compiled, namespace)
except SystemExit:
    raise
except BaseException as e:  # noqa: BLE001 - report whatever the code raised
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.exit(1)
