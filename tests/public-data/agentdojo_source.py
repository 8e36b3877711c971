"""Reading AgentDojo's source as data (nothing of the package is imported or
run): its prompts and attack texts are string constants and f-strings of
constants. Used by extract.py and tests/bench/guards.py."""

import ast


def render(node, names):
    """The text of a string constant or of an f-string whose fields are
    names in `names` (or `self.NAME`); `None` for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
            continue
        field = v.value if isinstance(v, ast.FormattedValue) else None
        if isinstance(field, ast.Attribute) and isinstance(field.value, ast.Name) and field.value.id == "self":
            key = field.attr
        elif isinstance(field, ast.Name):
            key = field.id
        else:
            return None
        if key not in names:
            return None
        parts.append(str(names[key]))
    return "".join(parts)
