//! How an answer ended.

/// Why the answer ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model answered.
    Stop,
    /// The model ran out of tokens.
    Length,
    ContentFilter,
    /// The model called client tools.
    ToolCalls,
    /// The iteration budget is spent and the model still wanted tools.
    MaxToolIterations,
    /// A spending budget of the caller is spent and the model still
    /// wanted tools.
    BudgetExceeded,
    /// A reason the upstream gave that the gateway does not know.
    Other(String),
}

impl FinishReason {
    /// The reason of a turn that ends the loop with an answer: what the
    /// model said, except that an answer without calls never finishes
    /// with `tool_calls`.
    pub fn of_answer(said: Option<&FinishReason>) -> FinishReason {
        match said {
            None | Some(FinishReason::ToolCalls) => FinishReason::Stop,
            Some(other) => other.clone(),
        }
    }

    /// OpenAI's `finish_reason` read.
    pub fn from_openai(reason: &str) -> FinishReason {
        match reason {
            "stop" => FinishReason::Stop,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }

    /// The reason as OpenAI's `finish_reason` spells it.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::MaxToolIterations => "max_tool_iterations",
            FinishReason::BudgetExceeded => "budget_exceeded",
            FinishReason::Other(s) => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_never_finishes_with_tool_calls() {
        let of = |r: &str| FinishReason::of_answer(Some(&FinishReason::from_openai(r)));
        assert_eq!(of("tool_calls"), FinishReason::Stop);
        assert_eq!(of("function_call"), FinishReason::Stop);
        assert_eq!(FinishReason::of_answer(None), FinishReason::Stop);
        assert_eq!(of("length").as_str(), "length");
        assert_eq!(of("eos").as_str(), "eos");
    }
}
