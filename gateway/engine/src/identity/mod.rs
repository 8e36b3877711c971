//! Who calls: API keys and what they may use ([`auth`]), tokens of an
//! OAuth authorization server ([`jwt`]), and each user's own credentials
//! for the APIs tools call on their behalf ([`credentials`]).

pub mod auth;
pub mod credentials;
pub mod jwt;
