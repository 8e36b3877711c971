//! A passed-through answer, metered: its bytes go to the client as they
//! come, and are read for the model's usage on the way; once the body
//! ends (or the client leaves), the call's spend is counted (its budgets'
//! reservations settled, the ledger and the metrics).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Bytes;
use http_body::Frame;
use toolgate_engine::governance::spend::prices::Price;
use toolgate_engine::governance::spend::{Admission, Spend, Who};
use toolgate_engine::model::protocol::metered::UsageReader;

/// What counts a passed-through call's spend.
#[derive(Debug)]
pub struct Meter {
    pub spend: Arc<Spend>,
    pub admission: Option<Admission>,
    pub who: Who,
    pub price: Option<Price>,
    pub model: String,
    pub reader: UsageReader,
    /// When the call began.
    pub began: std::time::Instant,
}

impl Meter {
    /// Counts the call, off the request's path.
    fn count(self, span: tracing::Span) {
        let Meter {
            spend,
            admission,
            who,
            price,
            model,
            reader,
            began,
        } = self;
        let usage = reader.finish();
        record_usage(&span, &usage);
        spend.count_soon(admission, who, model, usage, price, began.elapsed());
    }
}

/// The usage on the model call's span (OpenTelemetry's GenAI names).
fn record_usage(span: &tracing::Span, u: &toolgate_engine::conversation::Usage) {
    // A disabled span would still look each field's name up.
    if u.is_empty() || span.is_disabled() {
        return;
    }
    span.record("gen_ai.usage.input_tokens", u.input);
    span.record("gen_ai.usage.output_tokens", u.output);
    span.record("gen_ai.usage.cache_read.input_tokens", u.cache_read);
    span.record("gen_ai.usage.cache_creation.input_tokens", u.cache_write);
}

/// A body read for its usage as it passes.
pub struct Metered<B> {
    body: B,
    meter: Option<Meter>,
    span: tracing::Span,
}

impl<B> Metered<B> {
    /// `body`, metered by `meter` (none: passed as it is).
    pub fn new(body: B, meter: Option<Meter>, span: tracing::Span) -> Metered<B> {
        Metered { body, meter, span }
    }
}

impl<B> Drop for Metered<B> {
    fn drop(&mut self) {
        if let Some(m) = self.meter.take() {
            m.count(self.span.clone());
        }
    }
}

impl<B: http_body::Body<Data = Bytes> + Unpin> http_body::Body for Metered<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(m)) = (frame.data_ref(), self.meter.as_mut()) {
                    m.reader.push_bytes(data);
                }
            }
            Poll::Ready(None) => {
                if let Some(m) = self.meter.take() {
                    m.count(self.span.clone());
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
