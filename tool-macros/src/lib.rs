//! The `#[tool]` attribute macro for toolgate native tools.
//!
//! Not implemented yet: this crate is an empty placeholder so the workspace
//! layout is in place. Native tools arrive with the macro issue.
