//! Upstream servers' questions handed back to a client of the 2026-07-28
//! revision, and its answers taken back (SEP-2322, "multi round-trip
//! requests").
//!
//! Such a client cannot be asked in the middle of a call. When a server
//! asks during a `tools/call`, `prompts/get` or `resources/read`, the
//! questions the client declared it can answer (elicitation, sampling,
//! roots) end the request
//! with an `input_required` result, under the server's own keys; the
//! client sends the request again with its answers and the `requestState`
//! it was given. That state is the gateway's: which server asked, the
//! server's own state, and the gateway's answers to the questions the
//! client could not answer — sealed with rmcp's codec (HMAC-SHA256, under a
//! key derived from `mcp.session_secret_env`, so any replica opens it) for
//! the same method, name and API key, for [`ANSWER_WITHIN`]. A state that
//! does not open is refused (-32602) and reaches no server.
//!
//! The server is told, with each such call, the capabilities the client
//! declared, so a server that respects them asks only what it can be
//! answered.
//!
//! A client that follows tasks (the Tasks extension, SEP-2663) may get a
//! task where a server runs the call as one: its id is the gateway's,
//! sealed the same way (which server runs it, the server's id) for the
//! tool set, key and subject; `tasks/get`, `tasks/update` and
//! `tasks/cancel` open it and ask that server. An id that does not open is
//! an unknown task (-32602).

use std::time::Duration;

use rmcp::model::{
    InputRequiredResult, InputResponses, ProtocolVersion, RequestStateCodec, SealOptions,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde::{Deserialize, Serialize};
use toolgate_engine::tools::tool::mcp::relay::{HandBack, Questions, Resume};

/// How long a client has to answer a server's questions.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30 * 60);

/// How long a task id handed to a client opens.
pub const TASK_IDS_OPEN_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a `requestState` handed to a client holds.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    /// The server that asked.
    server: String,
    /// The server's own state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<String>,
    /// The gateway's answers to the questions the client could not answer.
    #[serde(default, skip_serializing_if = "InputResponses::is_empty")]
    answered: InputResponses,
    /// The call that waits for the answers, parked on this replica (a
    /// server of an older revision asked in the middle of it: see
    /// `parked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parked: Option<String>,
    /// Where the replica that parked the call is reached
    /// (`mcp.replica_url_env`), for another replica to forward the
    /// answers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replica: Option<String>,
    /// Until when (seconds since the epoch) the answers are forwarded
    /// there: as long as the parked call waits, not as long as the state
    /// opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    forward_until: Option<u64>,
}

/// A client's answers to the question of a parked call.
pub struct Answers {
    /// The parked call (see `parked`).
    pub id: String,
    /// The client's answers, by the keys of the questions.
    pub answers: InputResponses,
    /// The URL of the replica that parked it, when it gave one and the
    /// call may still wait there.
    pub replica: Option<String>,
}

/// A request of a 2026-07-28 client, as far as it answers questions.
#[derive(Default)]
pub struct Handing {
    /// What it can answer, and its answers for a server that asked in
    /// its result.
    pub hand_back: Option<HandBack>,
    /// The parked call its answers are for, with the answers.
    pub parked: Option<Answers>,
}

/// The request a state belongs to: its method, the tool's or prompt's
/// name, and the API key's name (empty when the gateway is open).
pub struct Request {
    pub method: &'static str,
    pub name: String,
    pub key: String,
}

impl Request {
    fn bound(&self) -> Vec<u8> {
        [self.method, &self.name, &self.key].join("\0").into_bytes()
    }
}

/// The hand-back of a request of a 2026-07-28 client (`None` for a
/// session of an older revision, which is asked beside the call): what it
/// declared it can answer, and its answers, if it sends some (checked
/// against the state they come with).
pub fn hand_back(
    codec: &RequestStateCodec,
    context: &RequestContext<RoleServer>,
    request: &Request,
    responses: Option<InputResponses>,
    state: Option<String>,
) -> Result<Handing, McpError> {
    let stateless = context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    if !stateless {
        return Ok(Handing::default());
    }
    #[allow(deprecated)] // sampling and roots (SEP-2577), still carried
    let (elicit, sample, roots, tasks) =
        context
            .client_capabilities()
            .map_or((false, false, false, false), |c| {
                (
                    c.elicitation.is_some(),
                    c.sampling.is_some(),
                    c.roots.is_some(),
                    c.supports_tasks(),
                )
            });
    if let Some((key, _)) = responses
        .iter()
        .flatten()
        .find(|(_, answer)| !answer.is_object())
    {
        return Err(McpError::invalid_params(
            format!(
                "inputResponses.{key} is not an object: each answer is the client's result for the request of that key (an elicitation, sampling or roots result)"
            ),
            None,
        ));
    }
    let mut parked = None;
    let resume = match state {
        Some(sealed) => {
            let opened: State = codec
                .open_json_with(&sealed, &request.bound())
                .map_err(|e| refused(&e))?;
            let mut responses = responses.unwrap_or_default();
            if let Some(id) = opened.parked {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                parked = Some(Answers {
                    id,
                    answers: std::mem::take(&mut responses),
                    replica: opened
                        .replica
                        .filter(|_| opened.forward_until.is_some_and(|until| now < until)),
                });
            }
            for (key, answer) in opened.answered {
                responses.entry(key).or_insert(answer);
            }
            Some(Resume {
                server: Some(opened.server),
                responses,
                state: opened.state,
            })
        }
        None => responses.map(|responses| Resume {
            server: None,
            responses,
            state: None,
        }),
    };
    let resume = resume.filter(|_| parked.is_none());
    Ok(Handing {
        hand_back: Some(HandBack {
            elicit,
            sample,
            roots,
            tasks,
            resume,
            handed: Default::default(),
        }),
        parked,
    })
}

/// The `input_required` result that hands `handed` to the client.
pub fn input_required(
    codec: &RequestStateCodec,
    request: &Request,
    handed: Questions,
) -> Result<InputRequiredResult, McpError> {
    let state = State {
        server: handed.server,
        state: handed.state,
        answered: handed.answered,
        parked: None,
        replica: None,
        forward_until: None,
    };
    seal(codec, request, &state, handed.requests)
}

/// The `input_required` result that asks the client `question` (under
/// `key`) for the call parked as `id` on the replica reached at `replica`.
pub fn parked_required(
    codec: &RequestStateCodec,
    request: &Request,
    (id, replica): (String, Option<String>),
    key: String,
    question: rmcp::model::InputRequest,
) -> Result<InputRequiredResult, McpError> {
    let state = State {
        server: String::new(),
        state: None,
        answered: InputResponses::new(),
        forward_until: replica.as_ref().map(|_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
                + super::parked::PARKED_FOR.as_secs()
        }),
        parked: Some(id),
        replica,
    };
    seal(codec, request, &state, [(key, question)].into())
}

fn seal(
    codec: &RequestStateCodec,
    request: &Request,
    state: &State,
    requests: rmcp::model::InputRequests,
) -> Result<InputRequiredResult, McpError> {
    let bound = request.bound();
    let sealed = codec
        .seal_json_with(
            state,
            &SealOptions::new()
                .associated_data(&bound)
                .ttl(ANSWER_WITHIN),
        )
        .map_err(|e| {
            McpError::internal_error(format!("the request state cannot be sealed: {e}"), None)
        })?;
    Ok(InputRequiredResult::new(Some(requests), Some(sealed)))
}

/// What a task id handed to a client holds.
#[derive(Debug, Serialize, Deserialize)]
struct TaskId {
    /// The server that runs the task.
    server: String,
    /// The server's id of the task.
    task: String,
}

/// The gateway's id of `server`'s task `task`, for the set and caller of
/// `request` (its `key`, its set as `name`).
pub fn task_id(
    codec: &RequestStateCodec,
    request: &Request,
    server: &str,
    task: &str,
) -> Result<String, McpError> {
    let bound = request.bound();
    codec
        .seal_json_with(
            &TaskId {
                server: server.to_owned(),
                task: task.to_owned(),
            },
            &SealOptions::new()
                .associated_data(&bound)
                .ttl(TASK_IDS_OPEN_FOR),
        )
        .map_err(|e| McpError::internal_error(format!("the task id cannot be sealed: {e}"), None))
}

/// The server and the server's id of a task the gateway handed out for
/// `request`'s set and caller; an id that does not open is an unknown
/// task (-32602).
pub fn open_task(
    codec: &RequestStateCodec,
    request: &Request,
    id: &str,
) -> Result<(String, String), McpError> {
    let opened: TaskId = codec.open_json_with(id, &request.bound()).map_err(|_| {
        McpError::invalid_params(
            "unknown task: its id was not issued by this gateway to this API key and tool set, or has expired",
            Some(serde_json::json!({"taskId": id})),
        )
    })?;
    Ok((opened.server, opened.task))
}

fn refused(e: &rmcp::model::RequestStateError) -> McpError {
    McpError::invalid_params(
        format!(
            "requestState was not issued by this gateway for this request and API key, or has expired ({e}); send the request again without it"
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> RequestStateCodec {
        RequestStateCodec::new_unchecked(vec![7u8; 32])
    }

    fn handed() -> Questions {
        let requests = serde_json::from_value(serde_json::json!({
            "user_name": {"method": "elicitation/create", "params": {
                "message": "What is your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
            }}
        }))
        .unwrap();
        Questions {
            server: "people".into(),
            requests,
            state: Some("upstream-state".into()),
            answered: [("roots".to_owned(), serde_json::json!({"roots": []}))].into(),
        }
    }

    fn open(codec: &RequestStateCodec, request: &Request, sealed: &str) -> Result<State, McpError> {
        codec
            .open_json_with(sealed, &request.bound())
            .map_err(|e| refused(&e))
    }

    #[test]
    fn a_state_opens_for_the_request_and_key_it_was_given_for_only() {
        let codec = codec();
        let request = |method: &'static str, name: &str, key: &str| Request {
            method,
            name: name.into(),
            key: key.into(),
        };
        let asked = request("tools/call", "greet", "alice");
        let result = input_required(&codec, &asked, handed()).unwrap();
        let sealed = result.request_state.clone().unwrap();
        assert!(result.input_requests.unwrap().contains_key("user_name"));
        let state = open(&codec, &asked, &sealed).unwrap();
        assert_eq!(state.server, "people");
        assert_eq!(state.state.as_deref(), Some("upstream-state"));
        assert!(state.answered.contains_key("roots"));
        for other in [
            request("tools/call", "greet", "bob"),
            request("tools/call", "other", "alice"),
            request("prompts/get", "greet", "alice"),
        ] {
            let e = open(&codec, &other, &sealed).unwrap_err();
            assert_eq!(
                e.code,
                rmcp::model::ErrorCode::INVALID_PARAMS,
                "{}",
                e.message
            );
        }
        let tampered = format!("{sealed}-TAMPERED");
        assert!(open(&codec, &asked, &tampered).is_err());
        let other_secret = RequestStateCodec::new_unchecked(vec![8u8; 32]);
        assert!(open(&other_secret, &asked, &sealed).is_err());
    }

    proptest::proptest! {
        /// Whatever a client sends back as a request state or a task id,
        /// it is refused with invalid params, never a panic, unless the
        /// gateway sealed it.
        #[test]
        fn any_state_or_task_id_a_client_makes_up_is_refused(sent in "\\PC{0,300}") {
            let codec = codec();
            let asked = Request {
                method: "tools/call",
                name: "greet".into(),
                key: "alice".into(),
            };
            let e = open(&codec, &asked, &sent).unwrap_err();
            proptest::prop_assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            let e = open_task(&codec, &asked, &sent).unwrap_err();
            proptest::prop_assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        }
    }

    #[test]
    fn a_task_id_opens_for_the_set_and_caller_it_was_given_to_only() {
        let codec = codec();
        let scope = |set: &str, key: &str| Request {
            method: "tasks",
            name: set.into(),
            key: key.into(),
        };
        let id = task_id(&codec, &scope("ops", "alice"), "jobs", "upstream-7").unwrap();
        assert_eq!(
            open_task(&codec, &scope("ops", "alice"), &id).unwrap(),
            ("jobs".to_owned(), "upstream-7".to_owned())
        );
        for (set, key) in [("ops", "bob"), ("web", "alice")] {
            let e = open_task(&codec, &scope(set, key), &id).unwrap_err();
            assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(e.message.contains("unknown task"), "{}", e.message);
        }
        assert!(open_task(&codec, &scope("ops", "alice"), "upstream-7").is_err());
    }
}
