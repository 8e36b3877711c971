//! What a call may do and what it leaves behind: policies (allow, deny,
//! approve, redact, by rules over the call), approvals held for a person,
//! guards on what tools answer, caps and rates ([`limits`]), and the audit
//! line of every call.

pub mod approvals;
pub mod audit;
pub mod guards;
pub mod injection_model;
pub mod limits;
pub mod pins;
pub mod policy;
pub mod secret_rules;
pub mod spend;
