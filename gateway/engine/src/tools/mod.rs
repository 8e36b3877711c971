//! Tools: the tool type and its kinds (HTTP, native, MCP; [`tool`]), code
//! mode's `run_code` ([`code`]) and tool search ([`discovery`]).

pub mod code;
pub mod discovery;
pub mod tool;
