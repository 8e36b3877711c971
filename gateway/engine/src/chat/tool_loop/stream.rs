//! A loop as a stream of events: each model call's stream decoded as it
//! comes (text and reasoning passed on at once, calls assembled), the
//! tools' progress reported while they run, one event per finished call.

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use toolgate_toolcall::{StreamEvent, StreamParser};

use super::{Mode, Next, PARSE, PROGRESS_BACKLOG, Run, Said};
use crate::chat::events::Event;
use crate::conversation::Call;
use crate::executor::CallProgress;
use crate::model::protocol::{Assembly, Delta, StreamDecoder};
use crate::model::upstream::Reply;

impl Run {
    /// The model calls, the tools and the spend are awaited in boxes, and
    /// each answer is read by a boxed stream of its own ([`Run::read`]):
    /// each is large, and the stream, which lives as long as the answer,
    /// would otherwise be sized for the largest of them.
    pub(super) fn stream(mut self, first: Reply) -> impl Stream<Item = Event> + Send {
        // Taken by the first iteration; captured as it is, not moved into
        // a local beside the capture. Answers are boxed until read: the
        // stream holds each in a slot of its own.
        let mut pending = Some(Box::new(first));
        async_stream::stream! {
            let mut iteration = 1;
            loop {
                self.iterations = iteration;
                // No local holds a call's outcome or a read item across a
                // yield: each would take its size in the stream's state
                // for the stream's whole life.
                let resp = match pending.take() {
                    Some(r) => r,
                    None => match Box::pin(self.call(iteration, true)).await {
                        Ok(r) => Box::new(r),
                        Err(e) => {
                            yield Event::Failed(Box::new(e));
                            return;
                        }
                    },
                };
                let mut said = None;
                {
                    let mut reading = Box::pin(self.read(*resp));
                    loop {
                        let event = match reading.next().await {
                            Some(Read::Event(e)) => e,
                            Some(Read::Said(s)) => {
                                said = Some(s);
                                continue;
                            }
                            None => break,
                        };
                        yield event;
                    }
                }
                // A failure was the last event.
                let Some(said) = said else { return };
                Box::pin(self.count_spend(!said.calls.is_empty())).await;
                Box::pin(self.remember(&said)).await;
                if let Err(e) = self.check_call_count(said.calls.len()) {
                    yield Event::Failed(Box::new(e));
                    return;
                }
                let (next, finish) = self.decide(&said, iteration);
                match next {
                    Next::Run(calls) => {
                        for c in &calls {
                            yield Event::ToolCallStarted(Box::new(c.clone()));
                        }
                        let before = self.calls.len();
                        // The tools' progress reports go out as they come.
                        let (tx, mut rx) = tokio::sync::mpsc::channel::<CallProgress>(PROGRESS_BACKLOG);
                        {
                            let mut running = Box::pin(self.run_calls(&said, &calls, iteration, Some(&tx)));
                            loop {
                                let report = tokio::select! {
                                    biased;
                                    Some(p) = rx.recv() => Some(p),
                                    () = &mut running => None,
                                };
                                match report {
                                    Some(p) => yield Event::ToolProgress(Box::new(p)),
                                    None => break,
                                }
                            }
                        }
                        while let Ok(p) = rx.try_recv() {
                            yield Event::ToolProgress(Box::new(p));
                        }
                        for record in &self.calls[before..] {
                            yield Event::ToolCallDone(Box::new(record.clone()));
                        }
                        iteration += 1;
                        continue;
                    }
                    Next::LastCall => {
                        self.last_call = true;
                        iteration += 1;
                        continue;
                    }
                    Next::ClientCalls(calls) => yield Event::ClientCalls(calls),
                    Next::Answer => {
                        if let Some(text) = self.budget_text(&said) {
                            yield Event::Content(text);
                        }
                    }
                }
                yield Event::Done(Box::new(self.finish(finish)));
                return;
            }
        }
    }

    /// One answer's stream read: its text and reasoning passed on as they
    /// come, its calls assembled, then what it said (none after a
    /// failure, which is the last event).
    fn read(&mut self, resp: Reply) -> impl Stream<Item = Read> + Send + '_ {
        async_stream::stream! {
            // The target that answered (on a route of several, any).
            let protocol = self.l.resolved.upstream.protocol;
            // Boxed, as only a structured-mode answer has one: the stream
            // holds its state for as long as the answer takes.
            let mut parser = match &self.mode {
                Mode::Structured { offered, .. } => Some(Box::new(StreamParser::with_options(offered.clone(), PARSE))),
                Mode::FunctionCalling { .. } => None,
            };
            let mut parsed = Said::default();
            let mut assembly = Assembly::default();
            let mut decoder = StreamDecoder::new(protocol);
            let limit = self.limits().max_upstream_response_bytes;
            let max_calls = self.limits().max_tool_calls_per_turn;
            let mut events = Box::pin(self.l.resolved.upstream.body_stream(resp, limit).eventsource());
            let mut done = false;
            while let Some(ev) = events.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    // Over the byte cap or past the deadline.
                    Err(eventsource_stream::EventStreamError::Transport(e)) => {
                        yield Read::Event(Event::Failed(Box::new(e.into())));
                        return;
                    }
                    Err(e) => {
                        yield Read::Event(Event::Failed(Box::new(self.invalid(format!("the stream broke: {e}")))));
                        return;
                    }
                };
                let step = match decoder.event(&ev.event, &ev.data) {
                    Ok(step) => step,
                    Err(e) => {
                        yield Read::Event(Event::Failed(Box::new(self.invalid(e))));
                        return;
                    }
                };
                for delta in step.deltas {
                    match (&delta, &mut parser) {
                        (Delta::Text(t), Some(p)) => {
                            for e in apply_events(p.push(t), &mut parsed) {
                                yield Read::Event(e);
                            }
                        }
                        (Delta::Text(t), None) => yield Read::Event(Event::Content(t.clone())),
                        (Delta::Reasoning(t), None) => yield Read::Event(Event::Reasoning(t.clone())),
                        (Delta::ReasoningOpaque(o), None) => yield Read::Event(Event::ReasoningOpaque(o.clone())),
                        _ => {}
                    }
                    if let Err(e) = assembly.push(delta, max_calls) {
                        yield Read::Event(Event::Failed(Box::new(self.invalid(e))));
                        return;
                    }
                }
                if step.done {
                    done = true;
                    break;
                }
            }
            // The answer is read: its connection can go back to the
            // pool before the tools run.
            drop(events);
            if !done && !decoder.complete() {
                yield Read::Event(Event::Failed(Box::new(self.invalid("the stream ended before the answer was complete".into()))));
                return;
            }
            // Finished before the match: a scrutinee lives as long as its
            // match, across every yield in it.
            let finished = parser.take().map(|p| p.finish());
            let said = match finished {
                Some(finished) => {
                    for e in apply_events(finished, &mut parsed) {
                        yield Read::Event(e);
                    }
                    self.count_usage(std::mem::take(&mut assembly.usage));
                    Said { finish: assembly.finish, ..parsed }
                }
                None => self.said(assembly),
            };
            yield Read::Said(Box::new(said));
        }
    }
}

/// What reading an answer gives: an event to pass on, then what it said
/// (boxed: the stream holds a slot of this size while it waits).
enum Read {
    Event(Event),
    Said(Box<Said>),
}

/// Folds parser events into what the turn said; returns the events to
/// send.
fn apply_events(events: Vec<StreamEvent>, said: &mut Said) -> Vec<Event> {
    let mut out = Vec::new();
    for e in events {
        match e {
            StreamEvent::Content(t) if !t.is_empty() => {
                said.content.get_or_insert_with(String::new).push_str(&t);
                out.push(Event::Content(t));
            }
            StreamEvent::Reasoning(t) if !t.is_empty() => {
                said.reasoning.get_or_insert_with(String::new).push_str(&t);
                out.push(Event::Reasoning(t));
            }
            StreamEvent::Call(c) => {
                crate::model::formatter::count_repaired(usize::from(c.repaired));
                said.calls.push(Call::from_parsed(c));
            }
            _ => {}
        }
    }
    out
}
