//! Policies (`policies:`): rules over the caller, the tool and its
//! arguments, in CEL (the `cel-interpreter` crate), compiled when the
//! configuration loads and checked by the executor for every call from
//! every face. The first rule that matches decides: `allow` lets the call
//! go on, `deny` refuses it with the rule's reason (which the model reads),
//! `approve` holds it for a person ([`crate::governance::approvals`]). `redact` rules
//! decide nothing; they make the audit log keep only a digest of the
//! call's arguments.

use cel_interpreter::{Context, Program, Value as Cel};
use globset::{Glob, GlobMatcher};
use serde_json::{Value, json};
use toolgate_config::format::{PolicyAction, PolicyDecl};

/// A compiled rule.
pub struct Policy {
    pub name: String,
    tools: Vec<GlobMatcher>,
    program: Program,
    pub action: PolicyAction,
    reason: Option<String>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

/// Why a rule cannot be used: which field, and what is wrong.
#[derive(Debug)]
pub struct PolicyError {
    /// `tools[2]` or `when`.
    pub field: String,
    /// The position in the expression (line, column; 1-based), if known.
    pub at: Option<(usize, usize)>,
    pub message: String,
}

impl Policy {
    /// Compiles `decl`.
    pub fn compile(decl: &PolicyDecl) -> Result<Policy, PolicyError> {
        let tools = decl
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                Glob::new(t)
                    .map(|g| g.compile_matcher())
                    .map_err(|e| PolicyError {
                        field: format!("tools[{i}]"),
                        at: None,
                        message: format!("the pattern is invalid: {e}"),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The parser can panic on some malformed input: that is a parse
        // error like any other.
        let parsed = std::panic::catch_unwind(|| {
            Program::compile(&decl.condition).map_err(|errors| {
                let at = errors.errors.first().map(|e| {
                    let line = usize::try_from(e.pos.0).unwrap_or(0);
                    let column = usize::try_from(e.pos.1).unwrap_or(0);
                    (line.max(1), column + 1)
                });
                (at, errors.to_string())
            })
        });
        let program = match parsed {
            Ok(Ok(program)) => program,
            Ok(Err((at, errors))) => {
                return Err(PolicyError {
                    field: "when".into(),
                    at,
                    message: format!("the CEL expression does not parse: {errors}"),
                });
            }
            Err(_) => {
                return Err(PolicyError {
                    field: "when".into(),
                    at: None,
                    message: "the CEL expression does not parse (it is incomplete or malformed)"
                        .into(),
                });
            }
        };
        Ok(Policy {
            name: decl.name.clone(),
            tools,
            program,
            action: decl.action,
            reason: decl.reason.clone(),
        })
    }

    fn applies_to(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|g| g.is_match(tool))
    }
}

/// Who calls, as policies see it.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub key: Option<&'a str>,
    pub project: Option<&'a str>,
    pub tool_set: Option<&'a str>,
    /// Who calls (a token's `sub`, else the key's name).
    pub subject: Option<&'a str>,
    /// The caller's token's claims, if it came with one.
    pub claims: Option<&'a Value>,
}

impl<'a> Caller<'a> {
    /// The caller of a call made in `ctx`.
    pub fn of(ctx: &'a toolgate::CallContext) -> Caller<'a> {
        Caller {
            key: ctx.key.as_deref(),
            project: ctx.project(),
            tool_set: ctx.tool_set.as_deref(),
            subject: ctx.subject.as_deref(),
            claims: ctx.claims.as_deref(),
        }
    }
}

/// What the rules decide for a call they let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It may run.
    Allow,
    /// It may run once a person approves it; the rule's name and reason.
    Approve {
        policy: String,
        reason: Option<String>,
    },
}

/// The rules' verdict on a call: `Err` with the reason the caller reads
/// when one denies it (or cannot be evaluated for it). `redact` rules
/// decide nothing here (see [`redacts`]).
pub fn check(
    policies: &[Policy],
    tool: &str,
    args: &Value,
    caller: Caller<'_>,
) -> Result<Verdict, String> {
    let rules = policies
        .iter()
        .filter(|p| p.action != PolicyAction::Redact && p.applies_to(tool));
    let Some(rule) = first_holding(rules, tool, args, caller)? else {
        return Ok(Verdict::Allow);
    };
    crate::support::metrics::record(|m| m.policy_decision(&rule.name, action_label(rule.action)));
    match rule.action {
        PolicyAction::Allow | PolicyAction::Redact => Ok(Verdict::Allow),
        PolicyAction::Approve => Ok(Verdict::Approve {
            policy: rule.name.clone(),
            reason: rule.reason.clone(),
        }),
        PolicyAction::Deny => Err(match &rule.reason {
            Some(reason) => format!("refused by policy `{}`: {reason}", rule.name),
            None => format!("refused by policy `{}`", rule.name),
        }),
    }
}

/// `true` when a `redact` rule holds for the call: its arguments are
/// audited as a digest only. A rule that cannot be evaluated redacts (the
/// safe side).
pub fn redacts(policies: &[Policy], tool: &str, args: &Value, caller: Caller<'_>) -> bool {
    let mut rules = policies
        .iter()
        .filter(|p| p.action == PolicyAction::Redact && p.applies_to(tool))
        .peekable();
    if rules.peek().is_none() {
        return false;
    }
    !matches!(first_holding(rules, tool, args, caller), Ok(None))
}

/// The first of `rules` whose expression holds for the call.
fn first_holding<'p>(
    rules: impl Iterator<Item = &'p Policy>,
    tool: &str,
    args: &Value,
    caller: Caller<'_>,
) -> Result<Option<&'p Policy>, String> {
    let mut rules = rules.peekable();
    if rules.peek().is_none() {
        return Ok(None);
    }
    let mut context = Context::default();
    let variables = [
        ("tool", json!(tool)),
        ("args", args.clone()),
        (
            "caller",
            json!({
                "key": caller.key, "project": caller.project, "tool_set": caller.tool_set,
                "subject": caller.subject, "claims": caller.claims.cloned().unwrap_or_else(|| json!({})),
            }),
        ),
    ];
    for (name, value) in variables {
        match cel_interpreter::to_value(value) {
            Ok(v) => context.add_variable_from_value(name, v),
            Err(e) => {
                return Err(format!(
                    "the call cannot be checked against the policies: {e}"
                ));
            }
        }
    }
    for rule in rules {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rule.program.execute(&context)
        }));
        let Ok(outcome) = run else {
            return Err(format!(
                "policy `{}` could not be evaluated for this call; it is refused",
                rule.name
            ));
        };
        match outcome {
            Ok(Cel::Bool(true)) => return Ok(Some(rule)),
            Ok(Cel::Bool(false)) => {}
            Ok(other) => {
                return Err(format!(
                    "policy `{}` gave {other:?}, not true or false, for this call; it is refused",
                    rule.name
                ));
            }
            Err(e) => {
                return Err(format!(
                    "policy `{}` could not be evaluated for this call ({e}); it is refused",
                    rule.name
                ));
            }
        }
    }
    Ok(None)
}

/// A digest of the rules as they are, for binding an approval to them: a
/// changed rule set asks again.
pub fn version(decls: &[toolgate_config::format::PolicyDecl], destructive: bool) -> String {
    use sha2::Digest;
    let text = serde_json::to_string(&(decls, destructive)).unwrap_or_default();
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn action_label(action: PolicyAction) -> &'static str {
    match action {
        PolicyAction::Allow => "allow",
        PolicyAction::Deny => "deny",
        PolicyAction::Approve => "approve",
        PolicyAction::Redact => "redact",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, tools: &[&str], when: &str, action: PolicyAction) -> Policy {
        Policy::compile(&PolicyDecl {
            name: name.into(),
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            condition: when.into(),
            action,
            reason: Some("no".into()),
        })
        .unwrap()
    }

    const NOBODY: Caller<'static> = Caller {
        key: None,
        project: None,
        tool_set: None,
        subject: None,
        claims: None,
    };

    #[test]
    fn the_first_matching_rule_decides() {
        let rules = [
            rule(
                "admins",
                &[],
                r#"caller.key == "admin""#,
                PolicyAction::Allow,
            ),
            rule(
                "etc",
                &["file_*"],
                r#"has(args.path) && args.path.startsWith("/etc")"#,
                PolicyAction::Deny,
            ),
        ];
        let etc = json!({"path": "/etc/passwd"});
        let e = check(&rules, "file_read", &etc, NOBODY).unwrap_err();
        assert_eq!(e, "refused by policy `etc`: no");
        assert!(check(&rules, "file_read", &json!({"path": "notes.md"}), NOBODY).is_ok());
        // Another tool: the rule does not apply.
        assert!(check(&rules, "lookup", &etc, NOBODY).is_ok());
        let admin = Caller {
            key: Some("admin"),
            ..NOBODY
        };
        assert!(check(&rules, "file_read", &etc, admin).is_ok());
    }

    #[test]
    fn a_rule_that_cannot_be_evaluated_refuses_the_call() {
        let rules = [rule(
            "bad",
            &[],
            "args.path.startsWith(\"/\")",
            PolicyAction::Deny,
        )];
        let e = check(&rules, "t", &json!({}), NOBODY).unwrap_err();
        assert!(e.contains("could not be evaluated"), "{e}");
        let rules = [rule("number", &[], "1 + 1", PolicyAction::Deny)];
        assert!(check(&rules, "t", &json!({}), NOBODY).is_err());
    }

    #[test]
    fn an_expression_that_does_not_parse_says_where() {
        let e = Policy::compile(&PolicyDecl {
            name: "x".into(),
            tools: vec![],
            condition: "args.path ==".into(),
            action: PolicyAction::Deny,
            reason: None,
        })
        .unwrap_err();
        assert_eq!(e.field, "when");
        assert!(e.message.contains("does not parse"), "{}", e.message);
    }

    #[test]
    fn approve_holds_and_redact_decides_nothing() {
        let rules = [
            rule("hidden", &["post_*"], "true", PolicyAction::Redact),
            rule(
                "big",
                &["post_*"],
                "has(args.amount) && args.amount > 100",
                PolicyAction::Approve,
            ),
            rule("posts", &["post_*"], "true", PolicyAction::Deny),
        ];
        let big = json!({"amount": 500});
        assert_eq!(
            check(&rules, "post_payment", &big, NOBODY),
            Ok(Verdict::Approve {
                policy: "big".into(),
                reason: Some("no".into())
            })
        );
        // The redact rule does not stop the deny rule after it.
        assert!(check(&rules, "post_payment", &json!({"amount": 5}), NOBODY).is_err());
        assert!(redacts(&rules, "post_payment", &big, NOBODY));
        assert!(!redacts(&rules, "lookup", &big, NOBODY));
        let broken = [rule("b", &[], "args.x > 1", PolicyAction::Redact)];
        assert!(
            redacts(&broken, "t", &json!({}), NOBODY),
            "unevaluable redacts"
        );
    }

    #[test]
    fn the_version_follows_the_rules() {
        let a = PolicyDecl {
            name: "a".into(),
            tools: vec![],
            condition: "true".into(),
            action: PolicyAction::Approve,
            reason: None,
        };
        let mut b = a.clone();
        b.condition = "false".into();
        let one = std::slice::from_ref(&a);
        assert_ne!(version(one, false), version(&[b], false));
        assert_ne!(version(one, false), version(one, true));
        let same = a.clone();
        assert_eq!(version(one, false), version(&[same], false));
    }
}
