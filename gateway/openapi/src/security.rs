//! Security schemes to request templates reading a declared environment
//! variable: API keys (header, query, cookie), HTTP bearer and basic,
//! OAuth 2 and OpenID Connect (as a bearer token the operator obtains).

use serde_json::Value;

use crate::names::sanitize;
use crate::spec::Dialect;

/// What one operation sends to authenticate, and the variables it reads.
#[derive(Debug, Default, Clone)]
pub struct Auth {
    pub headers: Vec<(String, String)>,
    pub query: Vec<(String, String)>,
    pub cookies: Vec<(String, String)>,
    /// Environment variables the templates read, each with what it holds.
    pub env: Vec<(String, String)>,
}

/// The credentials of the spec, resolved once.
pub struct Security<'a> {
    root: &'a Value,
    dialect: Dialect,
    /// `--auth-env`: one variable for every scheme.
    auth_env: Option<&'a str>,
    /// The stem of derived variable names (`PETSTORE` in `PETSTORE_API_KEY`).
    env_stem: String,
}

impl<'a> Security<'a> {
    pub fn new(
        root: &'a Value,
        dialect: Dialect,
        auth_env: Option<&'a str>,
        env_stem: String,
    ) -> Self {
        Security {
            root,
            dialect,
            auth_env,
            env_stem,
        }
    }

    /// The authentication of `op`: the first of its (else the spec's)
    /// security requirements whose schemes are all supported. Without any
    /// scheme in the spec, `--auth-env` is sent as a bearer token.
    pub fn for_operation(&self, op: &Value) -> Result<Auth, String> {
        let requirements = op
            .get("security")
            .or_else(|| self.root.get("security"))
            .and_then(Value::as_array);
        let Some(requirements) = requirements else {
            return Ok(match self.auth_env {
                Some(env) if self.schemes().is_none_or(|s| s.is_empty()) => Auth {
                    headers: vec![(
                        "Authorization".into(),
                        format!("Bearer {{{{ env.{env} }}}}"),
                    )],
                    env: vec![(env.to_string(), "the API's bearer token".into())],
                    ..Auth::default()
                },
                _ => Auth::default(),
            });
        };
        if requirements.is_empty() {
            return Ok(Auth::default());
        }
        let mut unsupported = Vec::new();
        let mut anonymous = false;
        for requirement in requirements {
            let Some(names) = requirement.as_object() else {
                continue;
            };
            if names.is_empty() {
                anonymous = true;
                continue;
            }
            let mut auth = Auth::default();
            let mut ok = true;
            for name in names.keys() {
                if let Err(e) = self.add(&mut auth, name) {
                    unsupported.push(e);
                    ok = false;
                    break;
                }
            }
            if ok {
                return Ok(auth);
            }
        }
        if anonymous {
            return Ok(Auth::default());
        }
        Err(format!(
            "its security ({}) is not supported",
            unsupported.join("; ")
        ))
    }

    fn schemes(&self) -> Option<&serde_json::Map<String, Value>> {
        match self.dialect {
            Dialect::OpenApi3 => self.root.pointer("/components/securitySchemes"),
            Dialect::Swagger2 => self.root.get("securityDefinitions"),
        }
        .and_then(Value::as_object)
    }

    fn add(&self, auth: &mut Auth, name: &str) -> Result<(), String> {
        let scheme = self
            .schemes()
            .and_then(|s| s.get(name))
            .ok_or_else(|| format!("scheme `{name}` is not declared"))?;
        let env = match self.auth_env {
            Some(e) => e.to_string(),
            None => format!(
                "{}_{}",
                self.env_stem,
                sanitize(name).to_ascii_uppercase().replace('-', "_")
            ),
        };
        let value = format!("{{{{ env.{env} }}}}");
        let kind = scheme
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let what = match kind {
            "apiKey" => {
                let key = scheme
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("API key scheme `{name}` has no `name`"))?;
                match scheme.get("in").and_then(Value::as_str) {
                    Some("header") => auth.headers.push((key.into(), value)),
                    Some("query") => auth.query.push((key.into(), value)),
                    Some("cookie") if !crate::names::is_cookie_name(key) => {
                        return Err(format!("API key cookie {key:?} is not a valid cookie name"));
                    }
                    Some("cookie") => auth.cookies.push((key.into(), value)),
                    other => {
                        return Err(format!(
                            "API key scheme `{name}` is in `{}`",
                            other.unwrap_or("?")
                        ));
                    }
                }
                format!("the API key `{key}`")
            }
            "http" => match scheme
                .get("scheme")
                .and_then(Value::as_str)
                .map(str::to_ascii_lowercase)
                .as_deref()
            {
                Some("bearer") => {
                    auth.headers
                        .push(("Authorization".into(), format!("Bearer {value}")));
                    "a bearer token".into()
                }
                Some("basic") => {
                    auth.headers
                        .push(("Authorization".into(), format!("Basic {value}")));
                    "`user:password` in base64".into()
                }
                other => {
                    return Err(format!(
                        "HTTP scheme `{}` of `{name}`",
                        other.unwrap_or("?")
                    ));
                }
            },
            "basic" => {
                auth.headers
                    .push(("Authorization".into(), format!("Basic {value}")));
                "`user:password` in base64".into()
            }
            "oauth2" | "openIdConnect" => {
                auth.headers
                    .push(("Authorization".into(), format!("Bearer {value}")));
                format!("an access token ({kind} scheme `{name}`)")
            }
            other => return Err(format!("`{name}` is of type `{other}`")),
        };
        if !auth.env.iter().any(|(e, _)| *e == env) {
            auth.env.push((env, what));
        }
        Ok(())
    }
}
