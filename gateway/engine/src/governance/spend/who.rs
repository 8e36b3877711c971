//! Whose spend a call is.

/// Who spends: the API key, the user (a bearer token's subject) and the
/// project of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Who {
    pub key: Option<String>,
    pub user: Option<String>,
    pub project: Option<String>,
}

impl Who {
    /// The spender of a call made with `context`.
    pub fn of(context: &toolgate::CallContext) -> Who {
        Who {
            key: context.key.clone(),
            // The subject is the user only when a token named one.
            user: context.claims.as_ref().and(context.subject.clone()),
            project: context.project().map(str::to_owned),
        }
    }
}
