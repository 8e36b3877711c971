//! Chats with tools: a request ([`crate::conversation::Request`]) runs as a [`Loop`] that
//! calls the model, runs the gateway tools it asks for and repeats, and ends
//! in an [`Answer`] or a stream of [`Event`]s. No wire format of a client's
//! is known here; the faces above encode the events.

mod events;
mod plan;
pub mod stored;
mod subagent;
mod tool_loop;

pub use events::{
    Answer, CallFunction, CallRecord, ChatError, Cost, Event, FinishReason, Report, Started,
    Summary,
};
pub use plan::Loop;
pub use plan::{NO_TOOL_SET, Passthrough, Plan, PlanError, Services, plan};
