//! Every face: each speaks one protocol to its clients, parses its
//! requests into the engine's, and encodes the engine's answers and events
//! back. [`common`] is what they share (the call context, the plan and the
//! caps, running the loop); [`chat`] is OpenAI's chat completions,
//! [`responses`] OpenAI's Responses, [`messages`] Anthropic's Messages,
//! [`gemini`] Google's Gemini API, [`metered`] a passed-through answer counted,
//! [`models`] the model list, [`tools`] the tool API, [`mcp`] the tool sets
//! as MCP servers (streamable HTTP and stdio), [`approvals`] the calls
//! held for a person's decision, [`console`] the pages for people.

pub mod approvals;
pub mod chat;
pub mod common;
pub mod connections;
pub mod console;
pub mod gemini;
pub mod mcp;
pub mod messages;
pub mod metered;
pub mod models;
pub mod responses;
pub mod spend;
pub mod tool_changes;
pub mod tools;
pub(crate) mod top;
